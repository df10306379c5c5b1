"""The decision log: JSON lines, an intent before a tool runs and the outcome after it.

Redaction happens here, at the edge: keys named like secrets and configured patterns are
replaced (the walk is ``core/redaction.py``), and the JSON Pointers of what was replaced are
recorded in the event (OPA's habit).

A write either lands whole or not at all: each line goes out in one ``write(2)`` on an
``O_APPEND`` descriptor (looping over short writes), and a failed write is cut back off the file,
so every line parses on its own. A write that fails raises ``AuditWriteError`` so the call can
fail closed. The path is checked before each write and reopened when the file was rotated
(renamed or deleted), so no event goes to a file that is no longer there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from gateway.core.errors import AuditWriteError
from gateway.core.limits import AUDIT_FILE_MODE, AUDIT_MAX_EVENT_BYTES, AUDIT_MAX_VALUE_BYTES
from gateway.core.redaction import Redaction
from gateway.pipeline.audit_encode import encode_event
from gateway.pipeline.audit_group import GroupCommit

__all__ = ["AuditLog", "Redactor"]

log = logging.getLogger("gateway.audit")

_OPEN_FLAGS = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC

# How far back from the end a partial last line is looked for when the file is opened.
_TAIL_CHUNK = 65_536


class Redactor(Redaction):
    """The audit log's redaction (``audit.redact_keys``, ``audit.redact_patterns``): the walk of
    ``core/redaction.py`` with the patterns given as regular expressions' text."""

    def __init__(self, keys: Sequence[str], patterns: Sequence[str]) -> None:
        super().__init__(keys, [re.compile(p) for p in patterns])


class AuditLog:
    """Appends JSON lines to a file and/or stdout; every line whole, or none of it."""

    def __init__(self, path: Path | None, stdout: bool = False, redactor: Redactor | None = None,
                 stream: TextIO | None = None, *, fsync: bool = False,
                 max_value_bytes: int = AUDIT_MAX_VALUE_BYTES, max_event_bytes: int = AUDIT_MAX_EVENT_BYTES,
                 group_commit: bool = True) -> None:
        self.path = path
        self.redactor = redactor or Redactor((), ())
        self.fsync = fsync
        self.max_value_bytes = max_value_bytes
        self.max_event_bytes = max_event_bytes
        self._stdout = stream if stream is not None else (sys.stdout if stdout else None)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._held: tuple[int, int] = (0, 0)  # (inode, device) of the file ``_fd`` is open on
        self._failing = False
        self.on_failure: Callable[[], None] | None = None  # told of each failed write (metrics)
        # Given each event written by ``write`` and its line as written (redacted), e.g. the console's table; a tap
        # never raises and never blocks.
        self.taps: list[Callable[[dict[str, Any], bytes], None]] = []
        # Group commit of durable writes: only where there is an fsync to share (a file alone, fsync on).
        shared = group_commit and fsync and path is not None and self._stdout is None
        self.group = GroupCommit(self) if shared else None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            _ignore_file_size_signal()

    def write(self, event: dict[str, Any]) -> None:
        """Write one event whole; raise ``AuditWriteError`` (and write nothing) if it cannot be."""
        line = encode_event(event, self.max_value_bytes, self.max_event_bytes)
        with self._lock:
            try:
                if self.path is not None:
                    self._append(line)
                if self._stdout is not None:
                    self._stdout.write(line.decode("utf-8"))
                    self._stdout.flush()
            except (OSError, ValueError) as exc:
                raise self._failed(exc) from exc
            self._written()
        for tap in self.taps:
            tap(event, line)

    async def write_durable(self, event: dict[str, Any]) -> None:
        """Write one event and return once it is as durable as configured (an intent, before its tool runs).

        With ``fsync`` on a file alone, concurrent callers' events are written and flushed together
        (gateway/pipeline/audit_group.py); otherwise this is ``write``. ``AuditWriteError`` if it cannot be.
        """
        if self.group is None:
            self.write(event)
            return
        await self.group.commit(encode_event(event, self.max_value_bytes, self.max_event_bytes))

    def append_batch(self, lines: list[bytes]) -> list[AuditWriteError | None]:
        """Append lines and make them durable with one ``fsync``: for each line None, or why it is not in the file.

        A line that cannot be written is cut back and fails alone; if the ``fsync`` fails, every line
        written by this batch is cut back and fails, since none is known to be durable.
        """
        outcomes: list[AuditWriteError | None] = []
        with self._lock:
            try:
                fd = self._open()
            except OSError as exc:
                self._close()
                error = self._failed(exc)
                return [error] * len(lines)
            written = 0
            for line in lines:
                done = 0
                try:
                    view = memoryview(line)
                    while view:
                        count = os.write(fd, view)
                        done += count
                        view = view[count:]
                except OSError as exc:
                    self._cut_back(fd, done)
                    outcomes.append(self._failed(exc))
                    continue
                written += done
                outcomes.append(None)
            if written:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    self._cut_back(fd, written)
                    error = self._failed(exc)
                    return [error] * len(lines)
            if all(outcome is None for outcome in outcomes):
                self._written()
        return outcomes

    def _failed(self, exc: Exception) -> AuditWriteError:
        """Note a failed write (hold ``_lock``): logged once until writes work again, counted each time."""
        if not self._failing:
            log.error("the audit log cannot be written, calls are refused until it can: %s", exc)
        self._failing = True
        if self.on_failure is not None:
            self.on_failure()
        return AuditWriteError(f"audit log write failed: {exc}")

    def _written(self) -> None:
        if self._failing:
            log.warning("the audit log is writable again")
            self._failing = False

    def _append(self, line: bytes) -> None:
        try:
            fd = self._open()
        except OSError:
            self._close()  # start from the path again next time
            raise
        written = 0
        try:
            view = memoryview(line)
            while view:  # a regular file takes it in one go; a short write is finished, not left half
                count = os.write(fd, view)
                written += count
                view = view[count:]
            if self.fsync:
                os.fsync(fd)
        except OSError:
            self._cut_back(fd, written)
            raise

    def _open(self) -> int:
        """The descriptor of the file now at ``path`` (reopened after a rotation).

        One ``stat`` of the path per event: the held descriptor's identity was taken when it was opened.
        """
        assert self.path is not None
        if self._fd is not None:
            try:
                now = os.stat(self.path)
            except FileNotFoundError:  # deleted, or renamed away and not yet recreated
                now = None
            if now is not None and (now.st_ino, now.st_dev) == self._held:
                return self._fd
            self._close()
        try:
            fd = os.open(self.path, os.O_RDWR | _OPEN_FLAGS, AUDIT_FILE_MODE)
        except PermissionError:  # a write-only file: appended to, but its tail cannot be checked
            fd = os.open(self.path, os.O_WRONLY | _OPEN_FLAGS, AUDIT_FILE_MODE)
            readable = False
        else:
            readable = True
        try:
            if readable:
                _cut_partial_line(fd, self.max_event_bytes)
            info = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._held = fd, (info.st_ino, info.st_dev)
        return fd

    def _cut_back(self, fd: int, written: int) -> None:
        """Remove the ``written`` bytes a failed event left at the end, so the next one starts on a line of its own."""
        if not written:
            return  # nothing of this event reached the file
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return  # a device or pipe (/dev/full, /dev/stdout) has nothing to cut
            if info.st_size >= written:  # never grow it (the file may have been truncated since)
                os.ftruncate(fd, info.st_size - written)
        except OSError:
            self._close()  # reopening looks for a partial last line and cuts it then

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Close the file (after the durable writes under way)."""
        if self.group is not None:
            self.group.close()
        with self._lock:
            self._close()


def _cut_partial_line(fd: int, max_event_bytes: int) -> None:
    """A file that ends inside a line (a crash mid-write) is cut back to its last full line.

    Only the tail an event can span is searched; a longer line with no newline is not ours, and gets
    a newline after it instead, so the next event still starts on a line of its own.
    """
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0 or os.pread(fd, 1, info.st_size - 1) == b"\n":
        return
    end = info.st_size
    while end > 0 and info.st_size - end < max_event_bytes + _TAIL_CHUNK:
        start = max(0, end - _TAIL_CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            log.warning("the audit log ended in a partial line (%d bytes); cut back to the last full line",
                        info.st_size - start - newline - 1)
            os.ftruncate(fd, start + newline + 1)
            return
        end = start
    if end == 0 and info.st_size <= max_event_bytes:
        os.ftruncate(fd, 0)
    else:
        os.write(fd, b"\n")


def _ignore_file_size_signal() -> None:
    """Past ``ulimit -f`` the kernel sends SIGXFSZ, which kills by default; ignored, the write fails
    with EFBIG instead and the call is refused. (CPython ignores it at startup; an embedding or a
    launcher may not have.)"""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
