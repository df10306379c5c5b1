"""The decision log: JSON lines, an intent before a tool runs and the outcome after it.

Redaction happens here, at the edge: keys named like secrets and configured patterns are
replaced (the walk is ``core/redaction.py``), and the JSON Pointers of what was replaced are
recorded in the event (OPA's habit).

A write either lands whole or not at all: each line goes out in one ``write(2)`` on an
``O_APPEND`` descriptor (looping over short writes), and a failed write is cut back off the file,
so every line parses on its own. A write that fails raises ``AuditWriteError`` so the call can
fail closed. The path is checked before each write and reopened when the file was rotated
(renamed or deleted), so no event goes to a file that is no longer there.

Every line is sealed into the writer's hash chain (``audit_chain.py``: ``chain``, ``seq``, ``prev``)
under the same lock as its write, from the bytes already encoded. At start the chain of the file's
last line is continued (``audit_tail.py``); a last line that cannot be continued stops the start
(``AuditChainBroken``) unless ``on_broken`` is ``start_new``. The file is locked (``flock``) while it
is held: one writer per file, so each file holds whole chains (``AuditLogInUse`` at start).
"""

from __future__ import annotations

import contextlib
import errno
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
from gateway.core.limits import AUDIT_CHAIN_FIELDS_BYTES, AUDIT_FILE_MODE, AUDIT_MAX_EVENT_BYTES, AUDIT_MAX_VALUE_BYTES
from gateway.core.redaction import Redaction
from gateway.pipeline.audit_chain import CHAIN_FIELDS
from gateway.pipeline.audit_encode import encode_event
from gateway.pipeline.audit_group import GroupCommit
from gateway.pipeline.audit_rotate import Rotation, rotate_files
from gateway.pipeline.audit_start import CHAINED, ChainSettings, start_chain
from gateway.pipeline.audit_tail import cut_partial_line

try:
    import fcntl
except ImportError:  # pragma: no cover (not POSIX: the file is not locked)
    fcntl = None  # type: ignore[assignment]

__all__ = ["AuditLog", "ChainSettings", "Redactor", "Rotation"]

log = logging.getLogger("gateway.audit")

_OPEN_FLAGS = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class Redactor(Redaction):
    """The audit log's redaction (``audit.redact_keys``, ``audit.redact_patterns``): the walk of
    ``core/redaction.py`` with the patterns given as regular expressions' text."""

    def __init__(self, keys: Sequence[str], patterns: Sequence[str]) -> None:
        super().__init__(keys, [re.compile(p) for p in patterns])


class AuditLog:
    """Appends JSON lines to a file and/or stdout; every line whole, or none of it, and each in the chain."""

    def __init__(self, path: Path | None, stdout: bool = False, redactor: Redactor | None = None,
                 stream: TextIO | None = None, *, fsync: bool = False,
                 max_value_bytes: int = AUDIT_MAX_VALUE_BYTES, max_event_bytes: int = AUDIT_MAX_EVENT_BYTES,
                 group_commit: bool = True, rotation: Rotation | None = None,
                 chain: ChainSettings | None = CHAINED) -> None:
        self.path = path
        self.redactor = redactor or Redactor((), ())
        self.fsync = fsync
        self.max_value_bytes = max_value_bytes
        self.max_event_bytes = max_event_bytes
        self.rotation = rotation
        # None: no chain at all (bench/audit_log.py measures the chain against that)
        self._line_bytes = max_event_bytes - (AUDIT_CHAIN_FIELDS_BYTES if chain is not None else 0)
        self._stdout = stream if stream is not None else (sys.stdout if stdout else None)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._held: tuple[int, int] = (0, 0)  # (inode, device) of the file ``_fd`` is open on
        self._size = 0  # of the file at ``path``, as of the last write
        self._readable = False  # whether ``_fd`` can be read (its tail)
        self._failing = False
        self._rotation_failing = False
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
        self.chain = None if chain is None else start_chain(path, chain, self._encode_plain, self._take)
        if self.chain is not None and (opening := self.chain.seal_opening()) is not None:
            with self._lock:
                try:
                    self._put(opening)
                except (OSError, ValueError) as exc:  # it stays first in line: written with the next event
                    log.error("the audit log cannot be written (%s): the new chain's first event waits", exc)

    def write(self, event: dict[str, Any]) -> None:
        """Write one event whole; raise ``AuditWriteError`` (and write nothing) if it cannot be."""
        line = self._encode(event)
        with self._lock:
            data = line if self.chain is None else self.chain.seal(line)
            try:
                self._put(data)
            except (OSError, ValueError) as exc:
                raise self._failed(exc) from exc
            self._written()
        for tap in self.taps:
            tap(event, data)

    async def write_durable(self, event: dict[str, Any]) -> None:
        """Write one event and return once it is as durable as configured (an intent, before its tool runs).

        With ``fsync`` on a file alone, concurrent callers' events are written and flushed together
        (gateway/pipeline/audit_group.py); otherwise this is ``write``. ``AuditWriteError`` if it cannot be.
        """
        if self.group is None:
            self.write(event)
            return
        await self.group.commit(self._encode(event))

    def append_batch(self, lines: list[bytes]) -> list[AuditWriteError | None]:
        """Append lines and make them durable with one ``fsync``: for each line None, or why it is not in the file.

        A line that cannot be written is cut back and fails alone; if the ``fsync`` fails, every line
        written by this batch is cut back and fails, since none is known to be durable.
        """
        outcomes: list[AuditWriteError | None] = []
        with self._lock:
            try:
                fd = self._rotated(self._open(), sum(map(len, lines)) + AUDIT_CHAIN_FIELDS_BYTES * len(lines))
            except OSError as exc:
                self._close()
                error = self._failed(exc)
                return [error] * len(lines)
            before = None if self.chain is None else self.chain.snapshot()
            written = 0
            for line in lines:
                data = line if self.chain is None else self.chain.seal(line)
                done = 0
                try:
                    view = memoryview(data)
                    while view:
                        count = os.write(fd, view)
                        done += count
                        view = view[count:]
                except OSError as exc:
                    self._cut_back(fd, done)
                    if self.chain is not None:
                        self.chain.undo()  # the line takes no place in the chain
                    outcomes.append(self._failed(exc))
                    continue
                written += done
                outcomes.append(None)
            if written:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    self._cut_back(fd, written)
                    if self.chain is not None and before is not None:
                        self.chain.restore(before)
                    error = self._failed(exc)
                    return [error] * len(lines)
            if all(outcome is None for outcome in outcomes):
                self._written()
        return outcomes

    def _encode(self, event: dict[str, Any]) -> bytes:
        if self.chain is not None and ("chain" in event or "seq" in event or "prev" in event):
            event = {k: v for k, v in event.items() if k not in CHAIN_FIELDS}  # the chain's, not the event's
        return encode_event(event, self.max_value_bytes, self._line_bytes)

    def _encode_plain(self, event: dict[str, Any]) -> bytes:
        return encode_event(event, self.max_value_bytes, self._line_bytes)

    def _put(self, data: bytes) -> None:
        """Write sealed bytes to the file and/or stdout (hold ``_lock``). Bytes that do not reach the file (or
        stdout, the only sink) are undone from the chain; in the file, they stay in it whatever stdout does."""
        if self.path is not None:
            try:
                self._append(data)
            except BaseException:
                self._undo()
                raise
        if self._stdout is not None:
            try:
                self._stdout.write(data.decode("utf-8"))
                self._stdout.flush()
            except BaseException:
                if self.path is None:
                    self._undo()
                raise

    def _undo(self) -> None:
        if self.chain is not None:
            self.chain.undo()

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

    def _append(self, data: bytes) -> None:
        try:
            fd = self._open()
            if self.rotation is not None:
                fd = self._rotated(fd, len(data))
        except OSError:
            self._close()  # start from the path again next time
            raise
        written = 0
        try:
            view = memoryview(data)
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
        """The descriptor of the file now at ``path`` (reopened after a rotation), locked.

        One ``stat`` of the path per event: the held descriptor's identity was taken when it was opened.
        """
        assert self.path is not None
        if self._fd is not None:
            try:
                now = os.stat(self.path)
            except FileNotFoundError:  # deleted, or renamed away and not yet recreated
                now = None
            if now is not None and (now.st_ino, now.st_dev) == self._held:
                self._size = now.st_size
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
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode):
                _lock(fd, self.path)  # before the tail is touched: it may be another writer's line under way
                if readable:
                    cut_partial_line(fd, self.max_event_bytes)
                    info = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._held, self._size, self._readable = fd, (info.st_ino, info.st_dev), info.st_size, readable
        return fd

    def _rotated(self, fd: int, incoming: int) -> int:
        """The descriptor to write ``incoming`` bytes to: a new file once the one open would pass ``rotation``."""
        if self.rotation is None or not self.rotation.due(self._size, incoming):
            return fd
        assert self.path is not None
        try:
            rotate_files(self.path, self.rotation.keep)
        except OSError as exc:  # the events still go in, to the file there is
            if not self._rotation_failing:
                log.error("the audit log cannot be rotated (%s): it goes on growing in %s", exc, self.path)
            self._rotation_failing = True
            return fd
        self._rotation_failing = False
        self._close()
        return self._open()

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
        """Close the file (after the durable writes under way, and a last checkpoint when signing)."""
        if self.group is not None:
            self.group.close()
        with self._lock:
            if self.chain is not None and (checkpoint := self.chain.seal_checkpoint()) is not None:
                try:
                    self._put(checkpoint)
                except (OSError, ValueError) as exc:
                    log.warning("the audit log's last checkpoint could not be written: %s", exc)
            self._close()

    def _take(self) -> int | None:
        """The file at ``path`` opened as a writer holds it (locked, a partial last line cut off), to read its
        tail: the descriptor, or None when it cannot be read through it (written to only, or not at all)."""
        try:
            fd = self._open()
        except BlockingIOError:
            raise  # another writer has it: the start stops
        except OSError:  # not writable (calls are refused until it is)
            return None
        return fd if self._readable else None


def _lock(fd: int, path: Path) -> None:
    """Hold the file for this writer (released when ``fd`` closes): BlockingIOError while another holds it."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise BlockingIOError(errno.EWOULDBLOCK, f"another process is writing {path} (one writer per audit file)",
                              str(path)) from None
    except OSError:  # a filesystem without locks (some network ones): nothing to guard with
        pass


def _ignore_file_size_signal() -> None:
    """Past ``ulimit -f`` the kernel sends SIGXFSZ, which kills by default; ignored, the write fails
    with EFBIG instead and the call is refused. (CPython ignores it at startup; an embedding or a
    launcher may not have.)"""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
