"""Counts written behind: what a SQL store has counted but not written yet, and the thread that writes it.

A call's counts go to memory at once (sessions as ``Delta`` increments, usage buckets as increments,
other rows as their newest statement) and a flush is queued on the writer thread. The flush takes
everything queued so far *in flight* and writes it in one transaction; a write that fails (the file
locked past its busy timeout, the server gone) puts its rows back, under anything queued meanwhile,
and is tried again. Readers combine a stored row with what is queued or in flight under ``lock``, and
``writes`` (bumped when a write begins and when it ends) tells them a write overlapped their read.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.core.limits import STORE_WRITE_COALESCE_SECONDS, STORE_WRITE_RETRY_SECONDS
from gateway.store.db import DB_ERRORS, Db
from gateway.store.delta import STATE_COLUMNS, Delta, apply, encoded, parsed
from gateway.store.model import SessionState

__all__ = ["COLUMNS", "CREATE_SESSION", "END_IMPLICIT", "PRUNE_USAGE", "UPSERT_IMPLICIT", "WriteBehind", "created"]

log = logging.getLogger("gateway.store")

# A session row's columns after its key (principal, id), in the order rows are read and created.
COLUMNS = ("started_at, calls, calls_by_tool, rejected, terminated, terminate_message, implicit, client, labels,"
           " history, tallies")


def created(state: SessionState) -> tuple[Any, ...]:
    """A fresh row's values of ``COLUMNS`` for the session (counters at zero, nothing carried: deltas add them)."""
    return (state.started_at, 0, "{}", 0, 0, None, int(state.implicit), state.client, "[]", "[]", "{}")


SessionKey = tuple[str, str]  # (principal, session id)
UsageKey = tuple[str, int, str]  # (principal, bucket, tool)
RowKey = tuple[str, ...]  # names one row of another table


class WriteBehind:
    """The queue of unwritten counts and rows of one store, and its writer thread and connection.

    ``lock`` also guards the store's cached sessions and usage totals, which it changes together with
    what is queued here (it is re-entered: counting a call counts its usage bucket too).
    """

    def __init__(self, db: Db, *, write_through: bool) -> None:
        self.db = db  # the writer's own connection
        # Writes behind wait a moment to gather more counts; a write-through call waits for its write, so not then.
        self.coalesce = 0.0 if write_through else STORE_WRITE_COALESCE_SECONDS
        self.transactions = 0  # writes of counts committed so far
        self.lock = threading.RLock()
        self.written = threading.Condition(self.lock)  # told when a write ends
        self.pending: dict[SessionKey, Delta] = {}  # session deltas not written yet
        self.in_flight: dict[SessionKey, Delta] = {}  # being written right now
        self.usage: dict[UsageKey, list[int]] = {}  # usage bucket increments: [calls, rejected]
        self.usage_in_flight: dict[UsageKey, list[int]] = {}
        self.rows: dict[RowKey, tuple[str, tuple[Any, ...]]] = {}  # other rows: newest statement each
        self.writes = 0  # writes of counts begun or ended so far (a read that overlaps one is read again)
        self._queued = False
        self._closing = False
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-sessions")

    def schedule(self) -> None:
        """Make sure one flush is queued (call holding ``lock``)."""
        if self._queued or self._closing:
            return
        self._queued = True
        self._worker.submit(self._flush_later)

    def queue_row(self, key: RowKey, statement: str, values: tuple[Any, ...]) -> None:
        """Queue one row's newest values (``statement`` with ``values``) to be written."""
        with self.lock:
            self.rows[key] = (statement, values)
            self.schedule()

    def add_usage(self, key: UsageKey, calls: int, rejected: int) -> None:
        """Queue increments of one usage bucket."""
        with self.lock:
            counts = self.usage.setdefault(key, [0, 0])
            counts[0] += calls
            counts[1] += rejected
            self.schedule()

    def usage_writing(self, principal: str) -> bool:
        """Whether a write of the principal's usage buckets is under way (hold ``lock``)."""
        return any(key[0] == principal for key in self.usage_in_flight)

    async def flushed(self) -> None:
        """Wait until every row queued so far is written (``RuntimeError`` once closed)."""
        await asyncio.get_running_loop().run_in_executor(self._worker, self.flush)

    def close(self) -> None:
        """Finish queued writes (one more try each), then close the connection."""
        with self.lock:
            self._closing = True
        self._worker.shutdown(wait=True)
        self.db.close()

    def _flush_later(self) -> None:
        if self.coalesce:
            time.sleep(self.coalesce)
        self.flush()

    def flush(self) -> None:
        """Write everything queued so far (on the writer thread)."""
        with self.lock:
            self._queued = False
            if not (self.pending or self.usage or self.rows):
                return
            sessions, self.in_flight, self.pending = self.pending, self.pending, {}
            usage, self.usage_in_flight, self.usage = self.usage, self.usage, {}
            rows, self.rows = self.rows, {}
            self.writes += 1
        try:
            self._write(sessions, usage, rows)
        finally:
            with self.written:
                self.in_flight, self.usage_in_flight = {}, {}
                self.writes += 1
                self.written.notify_all()

    def _write(self, sessions: dict[SessionKey, Delta], usage: dict[UsageKey, list[int]],
               rows: dict[RowKey, tuple[str, tuple[Any, ...]]]) -> None:
        db = self.db
        started = time.monotonic()
        try:
            db.begin()
            for key in sorted(sessions):  # one order for every process: row locks never deadlock
                _write_session(db, key, sessions[key])
            for (principal, bucket, tool), (calls, rejected) in sorted(usage.items()):
                db.execute(_ADD_USAGE, (principal, bucket, tool, calls, rejected))
            for statement, values in rows.values():
                db.execute(statement, values)
            db.commit()
            self.transactions += 1
        except DB_ERRORS as exc:  # locked past the busy timeout, or the server gone: keep the rows, try again
            try:
                db.rollback()
            except DB_ERRORS:
                pass
            log.warning("%d session rows not saved yet: %s", len(sessions) + len(usage) + len(rows), exc)
            if time.monotonic() - started < STORE_WRITE_RETRY_SECONDS:  # failed at once (server down): no hot loop
                time.sleep(STORE_WRITE_RETRY_SECONDS)
            self._put_back(sessions, usage, rows)

    def _put_back(self, sessions: dict[SessionKey, Delta], usage: dict[UsageKey, list[int]],
                  rows: dict[RowKey, tuple[str, tuple[Any, ...]]]) -> None:
        """Queue a failed write's rows again, before what was queued meanwhile."""
        with self.lock:
            for key, delta in sessions.items():
                later = self.pending.get(key)
                self.pending[key] = delta.then(later) if later is not None else delta
            for ukey, (calls, rejected) in usage.items():
                counts = self.usage.setdefault(ukey, [0, 0])
                counts[0] += calls
                counts[1] += rejected
            for rkey, row in rows.items():
                self.rows.setdefault(rkey, row)  # a newer state queued meanwhile wins
            self.in_flight, self.usage_in_flight = {}, {}
            self.schedule()


def _write_session(db: Db, key: SessionKey, delta: Delta) -> None:
    """Apply one session's delta to its row, under the row's lock: read, add, write."""
    db.execute(CREATE_SESSION, (*key, *delta.created))
    if delta.empty:
        return
    row = db.execute(db.for_update(f"SELECT {STATE_COLUMNS} FROM sessions WHERE principal = ? AND id = ?"),
                     key).fetchone()
    db.execute(_UPDATE_SESSION, (*encoded(apply(parsed(row), delta)), *key))


# A session's row made with its first values unless it exists (a delta's ``created``, ``SqlStore``'s ``created``).
CREATE_SESSION = (f"INSERT INTO sessions (principal, id, {COLUMNS}) VALUES ({', '.join(['?'] * 13)})"
                  " ON CONFLICT (principal, id) DO NOTHING")
_UPDATE_SESSION = (f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in STATE_COLUMNS.split(', '))}"
                   " WHERE principal = ? AND id = ?")
_ADD_USAGE = ("INSERT INTO usage (principal, bucket, tool, calls, rejected) VALUES (?, ?, ?, ?, ?)"
              " ON CONFLICT (principal, bucket, tool) DO UPDATE SET calls = usage.calls + excluded.calls,"
              " rejected = usage.rejected + excluded.rejected")
PRUNE_USAGE = "DELETE FROM usage WHERE bucket <= ?"
UPSERT_IMPLICIT = ("INSERT INTO implicit_runs (principal, client, run_id, last_call) VALUES (?, ?, ?, ?)"
                   " ON CONFLICT (principal, client) DO UPDATE SET run_id = excluded.run_id,"
                   " last_call = excluded.last_call")
# An implicit run ended by an administrator: idle since the epoch, so its pair's next call starts a new run.
END_IMPLICIT = "UPDATE implicit_runs SET last_call = 0 WHERE principal = ? AND run_id = ?"
