"""The end of an audit file: a partial last line cut off, and the last line read back to continue its chain.

When the gateway starts it continues the chain of its file's last line. A file that ends inside a line
(a crash mid-write) is first cut back to its last full line; that line must then be a chained event
(``audit_chain.parse_link``), or the chain cannot be continued (``BrokenTail`` says why). Only the tail
an event can span is read, never the whole file. A file with no line yet takes up the chain of the file
rotated before it (``FILE.1``), so a rename between the last event and the next start keeps the chain.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gateway.pipeline.audit_chain import Link, line_digest, parse_link

__all__ = ["BrokenTail", "Tail", "cut_partial_line", "read_tail"]

log = logging.getLogger("gateway.audit")

# How far back from the end a line is looked for at a time.
_TAIL_CHUNK = 65_536


class BrokenTail(Exception):
    """Why the last line of an audit file cannot be continued (never escapes: the start turns it into
    ``AuditChainBroken``, or into the reason of a new chain)."""


@dataclass(frozen=True, slots=True)
class Tail:
    """The last line of a file, where its chain stands: its link and its SHA-256 (the next ``prev``)."""

    link: Link
    digest: str


def cut_partial_line(fd: int, max_event_bytes: int) -> None:
    """A file that ends inside a line (a crash mid-write) is cut back to its last full line.

    Only the tail an event can span is searched; a longer line with no newline is not ours, and gets
    a newline after it instead, so the next event still starts on a line of its own.
    """
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0 or os.pread(fd, 1, info.st_size - 1) == b"\n":
        return
    end = _line_start(fd, info.st_size, max_event_bytes)
    if end is not None:
        if end:
            log.warning("the audit log ended in a partial line (%d bytes); cut back to the last full line",
                        info.st_size - end)
        os.ftruncate(fd, end)
    else:
        os.write(fd, b"\n")


def read_tail(fd: int, path: Path, max_line_bytes: int) -> Tail | None:
    """The chain of the file's last full line; None when the file holds no line. ``BrokenTail`` when that
    line is not a chained event (or longer than ``max_line_bytes``); a partial line after it (a crash) is
    ignored: the writer cuts it off before its next write."""
    size = os.fstat(fd).st_size
    end: int | None = size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        end = _line_start(fd, size, max_line_bytes)
    if end is None:
        raise BrokenTail(f"{path} ends in a line with no newline, longer than any event")
    if end == 0:
        return None
    start = _line_start(fd, end - 1, max_line_bytes)
    if start is None:
        raise BrokenTail(f"the last line of {path} is longer than any event (ending at byte {end})")
    line = os.pread(fd, end - start, start)
    link = parse_link(line)
    if link is None:
        raise BrokenTail(f"the last line of {path} (at byte {start}) is not a chained event: it was changed, cut,"
                         " or written by a gateway before the chain")
    return Tail(link, line_digest(line))


def _line_start(fd: int, end: int, max_event_bytes: int) -> int | None:
    """Where the line holding byte ``end - 1`` starts (just after the newline before ``end``); None when no
    newline is found within the span of an event (and the file does not start within it)."""
    limit = end - max_event_bytes - _TAIL_CHUNK
    at = end
    while at > 0 and at > limit:
        start = max(0, at - _TAIL_CHUNK)
        newline = os.pread(fd, at - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        at = start
    return 0 if at == 0 and end <= max_event_bytes else None
