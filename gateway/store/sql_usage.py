"""Usage windows and implicit runs in a SQL database: counted in memory, written behind, read back when needed.

A principal's usage buckets are read on the reader thread at each call when several processes share the
database (``now``), combined with this process's unwritten increments as a session's row is; the in-memory
counters' first look at a principal or a client's implicit run is answered on the loader connection.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from gateway.core.errors import StoreUnavailable
from gateway.core.limits import SESSION_READ_ATTEMPTS, SESSION_WRITE_WAIT_SECONDS
from gateway.store.db import DB_ERRORS, Db
from gateway.store.implicit_runs import ImplicitRuns
from gateway.store.usage import Totals, UsageCounter
from gateway.store.write_behind import END_IMPLICIT, PRUNE_USAGE, UPSERT_IMPLICIT, WriteBehind

__all__ = ["SqlUsage"]

_BUCKETS = "SELECT bucket, tool, calls, rejected FROM usage WHERE principal = ? AND bucket > ?"


class SqlUsage:
    """A SQL store's usage buckets (``usage``) and implicit runs (``implicit_runs``), kept in its database."""

    def __init__(self, queue: WriteBehind, reader: Db, read_worker: ThreadPoolExecutor, loader: Db,
                 loader_lock: threading.Lock, *, usage_windows: Mapping[str, float], idle_timeout: float) -> None:
        self._queue = queue
        self._reader, self._read_worker = reader, read_worker
        self._loader, self._loader_lock = loader, loader_lock
        self._pruned_bucket = 0
        self.usage = UsageCounter(usage_windows, self.changed, self.rows)
        self.implicit_runs = ImplicitRuns(idle_timeout, self.run_changed, self.run_row)

    # -- usage buckets ------------------------------------------------------------------------------

    async def now(self, principal: str) -> dict[str, Totals]:
        """The principal's usage windows as the database has them now (every process's calls), plus this
        process's not written yet; read off the event loop. ``StoreUnavailable`` if they cannot be read."""
        if not self.usage.windows:
            return {}
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._read_worker, self._refresh, principal)
        except RuntimeError:  # the reader was shut down: the gateway is stopping; this process's view stands
            pass
        with self._queue.lock:
            return self.usage.snapshot(principal)

    def _refresh(self, principal: str) -> None:
        """As a session's refresh, for the principal's usage buckets (on the reader thread)."""
        queue = self._queue
        for _ in range(SESSION_READ_ATTEMPTS):
            with queue.written:
                if queue.usage_writing(principal):
                    queue.written.wait(SESSION_WRITE_WAIT_SECONDS)
                if queue.usage_writing(principal):
                    return  # a writer stuck on a locked database: this process's view stands
                writes, after = queue.writes, self.usage.oldest_kept()
            try:
                rows = self._reader.execute(_BUCKETS, (principal, after)).fetchall()
            except DB_ERRORS as exc:  # fail closed, as for a session
                raise StoreUnavailable(f"the usage database is unavailable ({exc})") from exc
            with queue.lock:
                if queue.writes != writes:
                    continue  # a write of this process's counts began or ended during the read: read again
                merged = [(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]
                merged.extend((bucket, tool, counts[0], counts[1])
                              for (who, bucket, tool), counts in queue.usage.items() if who == principal)
                self.usage.replace(principal, merged)
                return

    def changed(self, principal: str, bucket: int, tool: str, calls: int, rejected: int) -> None:
        """Queue increments of one of the principal's buckets (the counter's ``changed``)."""
        self._queue.add_usage((principal, bucket, tool), calls, rejected)
        if self.usage.longest and bucket > self._pruned_bucket:  # once a minute: drop buckets past every window
            self._pruned_bucket = bucket
            self._queue.queue_row(("usage-prune",), PRUNE_USAGE, (bucket - self.usage.longest,))

    def rows(self, principal: str, after: int) -> list[tuple[int, str, int, int]]:
        """The principal's stored buckets after minute ``after`` (the counter's first look)."""
        with self._loader_lock:
            rows = self._loader.execute(_BUCKETS, (principal, after)).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    # -- implicit runs ------------------------------------------------------------------------------

    async def implicit_run(self, principal: str, client: str, session: str | None = None) -> str:
        """The current implicit run of (principal, client) for a call of protocol ``session`` (if any); its
        first look here reads on the read worker."""
        if self.implicit_runs.cached(principal, client):
            return self.implicit_runs.run_for(principal, client, session=session)
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(self._read_worker, self.run_row, principal, client)
        # a pair cached meanwhile keeps its run
        return self.implicit_runs.run_for(principal, client, stored, session=session)

    def end_run(self, principal: str, run_id: str) -> None:
        """The implicit run is no longer current: its client's next call starts a new one."""
        self.implicit_runs.end(principal, run_id)
        self._queue.queue_row(("implicit-end", principal, run_id), END_IMPLICIT, (principal, run_id))

    def run_changed(self, principal: str, client: str, run_id: str, last_call: float) -> None:
        """Queue the pair's current run and its last call (the runs' ``changed``)."""
        self._queue.queue_row(("implicit_runs", principal, client), UPSERT_IMPLICIT,
                              (principal, client, run_id, last_call))

    def run_row(self, principal: str, client: str) -> tuple[str, float] | None:
        """The pair's stored run and its last call, if any (the runs' first look)."""
        with self._loader_lock:
            row = self._loader.execute("SELECT run_id, last_call FROM implicit_runs WHERE principal = ? AND client = ?",
                                       (principal, client)).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))
