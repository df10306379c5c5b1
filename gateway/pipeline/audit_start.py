"""The decision log's chain at start: continue the chain of the file's last line, or begin one.

- a file with chained lines: its last line's chain goes on (same ``chain``, the next ``seq``, ``prev``
  naming that line), across restarts of its writer;
- no file, or one with no line yet: the chain of ``FILE.1`` goes on when there is one (a rotation between
  the last event and this start), else a new chain begins;
- a device or a pipe (``/dev/stdout``), or stdout alone: a new chain each start (nothing to read back);
- a last line that is not a chained event, or a file that cannot be read: ``AuditChainBroken`` (the start
  stops), unless ``on_broken`` is ``start_new``: then a new chain begins with an ``audit.chain_started``
  event saying why, and the gateway logs it.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.core.errors import AuditChainBroken, AuditLogInUse
from gateway.core.limits import AUDIT_CHECKPOINT_EVERY, AUDIT_VERIFY_MAX_LINE_BYTES
from gateway.pipeline.audit_chain import CHAIN_STARTED_EVENT, ChainWriter, Encode, new_chain_id
from gateway.pipeline.audit_keys import CheckpointSigner
from gateway.pipeline.audit_rotate import rotated_name
from gateway.pipeline.audit_tail import BrokenTail, Tail, read_tail

__all__ = ["CHAINED", "ChainSettings", "start_chain"]

log = logging.getLogger("gateway.audit")

# A last line read back at start may be longer than today's audit.max_event_bytes (written under a larger one).
_TAIL_LINE_BYTES = AUDIT_VERIFY_MAX_LINE_BYTES


@dataclass(frozen=True, slots=True)
class ChainSettings:
    """How the chain is kept: checkpoints signed by ``signer`` every ``every`` events (none without one), and
    what a start does when the file's last line cannot be continued: ``stop``, or ``start_new`` (audited)."""

    signer: CheckpointSigner | None = None
    every: int = AUDIT_CHECKPOINT_EVERY
    on_broken: Literal["stop", "start_new"] = "stop"


CHAINED = ChainSettings()


def start_chain(path: Path | None, settings: ChainSettings, encode: Encode,
                take: Callable[[], int | None]) -> ChainWriter:
    """The writer's chain for the file at ``path``. ``take`` opens that file as the writer holds it (locked,
    a partial last line cut off) and gives a descriptor to read its tail through, or None when it cannot."""
    keys: dict[str, Any] = {"encode": encode, "signer": settings.signer, "every": settings.every}
    try:
        tail = _tail(path, take)
    except BrokenTail as exc:
        if settings.on_broken == "stop":
            raise AuditChainBroken(
                f"{path}: error[{AuditChainBroken.code}]: the audit chain cannot be continued: {exc}; hint: move"
                " the file away to begin a new log, or set audit.on_broken_chain: start_new to begin a new chain"
                f" after it (recorded as an {CHAIN_STARTED_EVENT} event)") from None
        log.warning("%s: a new audit chain begins (audit.on_broken_chain: start_new)", exc)
        opening = {**audit_head(CHAIN_STARTED_EVENT, now_rfc3339(), None), "reason": str(exc), "file": str(path)}
        return ChainWriter(new_chain_id(), opening=[opening], **keys)
    if tail is None:
        return ChainWriter(new_chain_id(), **keys)
    return ChainWriter(tail.link.chain, tail.link.seq, tail.digest, **keys)


def _tail(path: Path | None, take: Callable[[], int | None]) -> Tail | None:
    """Where the chain stands at the end of the file (else of ``FILE.1``); None: nothing to continue."""
    if path is None:
        return None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        return None
    if info is not None:
        try:
            fd = take()
        except BlockingIOError as exc:
            raise AuditLogInUse(f"{path}: error[{AuditLogInUse.code}]: {exc.strerror}; hint: give each gateway"
                                " process its own audit.file") from None
        found = read_tail(fd, path, _TAIL_LINE_BYTES) if fd is not None else _read_tail_of(path)
        if found is not None:
            return found
    rotated = rotated_name(path, 1)
    return _read_tail_of(rotated) if os.path.isfile(rotated) else None


def _read_tail_of(path: Path) -> Tail | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError as exc:
        raise BrokenTail(f"{path} cannot be read ({exc.strerror}), so its last line is unknown") from None
    try:
        return read_tail(fd, path, _TAIL_LINE_BYTES)
    finally:
        os.close(fd)
