"""Group commit of durable audit writes: concurrent calls' intent records share one write and one fsync.

With ``audit.fsync`` on, each intent must be on disk before its tool runs. One ``fsync`` per call on
the event loop stalls every other call for the length of a disk flush; here the lines queue, one
thread writes whatever has queued and flushes it once, and each caller resumes when the batch that
holds its line is durable. While a batch is being flushed the next one gathers, so under load a
flush carries many calls and alone it carries one (no waiting for company). A line that cannot be
written fails alone; a failed flush fails every line of its batch (AuditLog.append_batch).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from gateway.core.errors import AuditWriteError

__all__ = ["BatchWriter", "GroupCommit"]


class BatchWriter(Protocol):
    """What the group commit writes through (``AuditLog``): a batch of lines made durable together."""

    def append_batch(self, lines: list[bytes]) -> list[AuditWriteError | None]:
        """For each line None, or why it is not in the file."""

_Waiter = tuple[bytes, asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class GroupCommit:
    """Queues encoded lines for one writer thread and wakes each caller when its line is durable."""

    def __init__(self, log: BatchWriter) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._draining = False
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-audit")
        self.batches = 0  # flushes made so far
        self.lines = 0  # lines made durable so far

    async def commit(self, line: bytes) -> None:
        """Return once ``line`` is in the file and flushed; ``AuditWriteError`` if it is not."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(_retrieved)  # a caller that stopped waiting leaves no unretrieved error behind
        with self._lock:
            self._queue.append((line, loop, done))
            start, self._draining = not self._draining, True
        if start:
            try:
                self._worker.submit(self._drain)
            except RuntimeError as exc:  # shut down: the gateway is stopping
                with self._lock:
                    self._draining = False
                raise AuditWriteError("the audit log is closed") from exc
        # Shielded: a caller that stops waiting does not stop the write; it was asked for and may land.
        await asyncio.shield(done)

    def _drain(self) -> None:
        """Write and flush batch after batch until the queue is empty (on the writer thread)."""
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._draining = False
                    return
            outcomes = self._log.append_batch([line for line, _, _ in batch])
            self.batches += 1
            self.lines += sum(outcome is None for outcome in outcomes)
            for (_, loop, done), outcome in zip(batch, outcomes, strict=True):
                try:
                    loop.call_soon_threadsafe(_settle, done, outcome)
                except RuntimeError:  # that caller's loop is closed: nobody is waiting
                    pass

    def close(self) -> None:
        """Finish the batches under way."""
        self._worker.shutdown(wait=True)


def _settle(done: asyncio.Future[None], outcome: AuditWriteError | None) -> None:
    if done.cancelled():
        return
    if outcome is None:
        done.set_result(None)
    else:
        done.set_exception(outcome)


def _retrieved(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()
