"""Admitting a call that counts in a tally: read, decide and count in one transaction (issue 21).

A tallied call is decided inside ``Admission.admit``: on the store's own admission thread and connection
(never the reader's or the approvals'), one transaction locks the principal's row of ``tally_locks`` and then
the run's session row (PostgreSQL ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` holds the whole file), reads
the run's tallies and the principal's window tallies as committed by every process (a store only this process
writes keeps the window rows in memory, so it reads them there), hands them to the caller's ``judge`` (pure
and synchronous: it decides the call), adds the change it returns to the run and to the principal's window
buckets, and commits. Two admissions of one principal, in one process or in two
sharing the database, therefore never read the same totals: under a cap, the admitted total never passes it.

Lock order: a principal's lock row, then one session row; the write-behind writer takes session rows only
(sorted) and never a lock row or a tally table, so the two never wait on each other in a cycle.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gateway.core.errors import StoreUnavailable
from gateway.core.limits import MAX_CACHED_SESSIONS, USAGE_BUCKET_SECONDS
from gateway.policy.flow import Tallies, TallyChange
from gateway.store.db import DB_ERRORS, Db
from gateway.store.model import SessionState, TallyView
from gateway.store.window_tallies import WindowTallies
from gateway.store.write_behind import CREATE_SESSION, SessionKey, WriteBehind, created

__all__ = ["Admission", "Judge"]

T = TypeVar("T")

# What decides an admitted call: the fresh tallies in, its result and what it adds (None: nothing) out.
Judge = Callable[[TallyView], tuple[T, TallyChange | None]]

_LOCK_ROW = "INSERT INTO tally_locks (principal) VALUES (?) ON CONFLICT (principal) DO NOTHING"
_LOCK = "SELECT principal FROM tally_locks WHERE principal = ?"
_RUN = "SELECT tallies FROM sessions WHERE principal = ? AND id = ?"
_SET_RUN = "UPDATE sessions SET tallies = ? WHERE principal = ? AND id = ?"
_SUMS = "SELECT bucket, tally, amount FROM tally_sums WHERE principal = ? AND bucket > ?"
_SEEN = "SELECT tally, value, bucket FROM tally_seen WHERE principal = ? AND bucket > ?"
_ADD_SUM = ("INSERT INTO tally_sums (principal, bucket, tally, amount) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (principal, bucket, tally) DO UPDATE SET amount = tally_sums.amount + excluded.amount")
_ADD_SEEN = ("INSERT INTO tally_seen (principal, tally, value, bucket) VALUES (?, ?, ?, ?)"
             " ON CONFLICT (principal, tally, value) DO UPDATE SET bucket = excluded.bucket")
_PRUNE_SUMS = "DELETE FROM tally_sums WHERE principal = ? AND bucket <= ?"
_PRUNE_SEEN = "DELETE FROM tally_seen WHERE principal = ? AND bucket <= ?"


class Admission:
    """A SQL store's admissions and window tallies.

    ``windows`` are the usage windows (name to minutes; none: only runs are tallied). Without
    ``write_through`` (this process alone writes the database) each principal's window rows are kept in
    memory once read, and admissions and ``window_tallies`` read them there; with it, both read them afresh.
    """

    def __init__(self, db: Db, queue: WriteBehind, reader: Db, read_worker: ThreadPoolExecutor, *,
                 windows: Mapping[str, int], write_through: bool) -> None:
        self._db = db  # the admission thread's own connection
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-admit")
        self._queue = queue  # its lock guards the cached states and window rows changed here
        self._reader, self._read_worker = reader, read_worker
        self.windows = dict(windows)
        self._longest = max(self.windows.values(), default=0)
        self._write_through = write_through
        self._rows: dict[str, WindowTallies] = {}  # without write-through: each principal's window rows
        self._pruned: dict[str, int] = {}  # the minute each principal's old window rows were last deleted
        self.ended = 0  # admissions ended so far (a session read that overlapped one keeps the state's tallies)

    @staticmethod
    def minute() -> int:
        """The current minute bucket (the usage windows')."""
        return int(time.time() // USAGE_BUCKET_SECONDS)

    def close(self) -> None:
        """Finish the admission under way, then close the connection."""
        self._worker.shutdown(wait=True)
        self._db.close()

    # -- window tallies -------------------------------------------------------------------------------

    async def window_tallies(self, principal: str) -> dict[str, Tallies]:
        """The principal's tallies per usage window now ({} with no windows); ``StoreUnavailable`` if unreadable."""
        if not self.windows:
            return {}
        now = self.minute()
        if not self._write_through:
            with self._queue.lock:
                rows = self._rows.get(principal)
            if rows is not None:
                return rows.view(self.windows, now)
        try:
            read = asyncio.get_running_loop().run_in_executor(self._read_worker, self._read, principal, now)
        except RuntimeError as exc:  # the reader was shut down: the gateway is stopping
            raise StoreUnavailable("the store is closing") from exc
        rows = await read
        if not self._write_through:
            with self._queue.lock:  # rows an admission kept meanwhile are newer than these
                rows = self._keep(principal, self._rows.get(principal) or rows)
        return rows.view(self.windows, now)

    def _read(self, principal: str, now: int) -> WindowTallies:
        try:
            return self._window_rows(self._reader, principal, now)
        except DB_ERRORS as exc:  # fail closed: a cap whose totals cannot be read is not checked
            raise StoreUnavailable(f"the tallies database is unavailable ({exc})") from exc

    def _window_rows(self, db: Db, principal: str, now: int) -> WindowTallies:
        oldest = now - self._longest
        return WindowTallies(db.execute(_SUMS, (principal, oldest)).fetchall(),
                             db.execute(_SEEN, (principal, oldest)).fetchall())

    def _keep(self, principal: str, rows: WindowTallies) -> WindowTallies:
        """Cache the principal's rows (hold the queue's lock)."""
        if principal not in self._rows and len(self._rows) >= MAX_CACHED_SESSIONS:
            self._rows.pop(next(iter(self._rows)))
        self._rows[principal] = rows
        return rows

    # -- admissions -----------------------------------------------------------------------------------

    async def admit(self, state: SessionState, judge: Judge[T]) -> T:
        """Decide and count one call in one transaction (see the module's docstring); ``judge``'s result.

        A reset of the run still waiting to be written is written first, so the admission reads what it left.
        ``judge`` raising rolls back and the error goes on; a database failure is ``StoreUnavailable``.
        """
        key = (state.principal, state.id)
        try:
            if self._reset_waiting(key):
                await self._queue.flushed()
            admitted = asyncio.get_running_loop().run_in_executor(self._worker, self._admit, state, judge)
        except RuntimeError as exc:  # a worker was shut down: the gateway is stopping
            raise StoreUnavailable("the store is closing") from exc
        return await admitted

    def _reset_waiting(self, key: SessionKey) -> bool:
        with self._queue.lock:
            waiting = (self._queue.pending.get(key), self._queue.in_flight.get(key))
        return any(d is not None and d.reset for d in waiting)

    def _admit(self, state: SessionState, judge: Judge[T]) -> T:
        key, db, now = (state.principal, state.id), self._db, self.minute()
        if self._reset_waiting(key):  # its write failed: the tallies it clears are still stored
            raise StoreUnavailable("the sessions database is unavailable (the run's reset is not saved yet)")
        with self._queue.lock:  # the row as the session's first write would make it (an unowned copy's counts)
            waiting = self._queue.pending.get(key) or self._queue.in_flight.get(key)
            first = waiting.created if waiting is not None else created(state)
        try:
            db.begin()
            run, rows = self._locked_read(key, first, now)
            result, change = judge(TallyView(run, rows.view(self.windows, now) if self.windows else {}))
            if change is not None and not change.empty:
                run = run.added(change)
                self._count(key, run, change, now)
                rows.add(change, now)
            db.commit()
        except DB_ERRORS as exc:
            self._rollback()
            raise StoreUnavailable(f"the tallies database is unavailable ({exc})") from exc
        except BaseException:
            self._rollback()
            raise
        with self._queue.lock:
            self.ended += 1
            if not self._reset_waiting(key):  # a reset made meanwhile clears them (it is written next)
                state.tallies = run
            if self.windows and not self._write_through:
                rows.expire(now - self._longest)
                self._keep(state.principal, rows)
        return result

    def _locked_read(self, key: SessionKey, first: tuple[Any, ...], now: int) -> tuple[Tallies, WindowTallies]:
        """Lock the principal, then the run's row (made if new); the run's tallies and the window rows."""
        db = self._db
        db.execute(_LOCK_ROW, (key[0],))
        db.execute(db.for_update(_LOCK), (key[0],)).fetchone()
        db.execute(CREATE_SESSION, (*key, *first))
        row = db.execute(db.for_update(_RUN), key).fetchone()
        run = Tallies.from_json(json.loads(row[0] or "{}"))
        if not self.windows:
            return run, WindowTallies()
        with self._queue.lock:  # this process alone writes the database: the rows it keeps are the stored ones
            kept = None if self._write_through else self._rows.get(key[0])
        return run, (kept.copy() if kept is not None else self._window_rows(db, key[0], now))

    def _count(self, key: SessionKey, run: Tallies, change: TallyChange, now: int) -> None:
        """Write the run's new tallies and add the change to the principal's window buckets."""
        db, principal = self._db, key[0]
        db.execute(_SET_RUN, (json.dumps(run.to_json()), *key))
        if not self.windows:
            return
        for tally, amount in sorted(change.sums.items()):
            db.execute(_ADD_SUM, (principal, now, tally, float(amount)))
        for tally, values in sorted(change.distinct.items()):
            for value in dict.fromkeys(values):
                db.execute(_ADD_SEEN, (principal, tally, value, now))
        if self._pruned.get(principal) != now:  # at most once a minute: the rows past every window
            db.execute(_PRUNE_SUMS, (principal, now - self._longest))
            db.execute(_PRUNE_SEEN, (principal, now - self._longest))
            if len(self._pruned) >= MAX_CACHED_SESSIONS:
                self._pruned.clear()
            self._pruned[principal] = now

    def _rollback(self) -> None:
        try:
            self._db.rollback()
        except DB_ERRORS:  # the connection broke: the server dropped the transaction with it
            pass
