"""Sessions, usage windows and implicit runs in a SQL database; the part SQLite and PostgreSQL share.

Four connections, each with its own use, so the event loop never waits for the database:

- the *reader* (a worker thread) reads a session's row at the start of each call, so counts and
  terminations made by other processes are seen;
- the *session writer* (a worker thread) writes counters behind, as increments (see delta.py);
- the *approvals* connection (a worker thread, ``run``) does approval work and listings;
- the *loader* answers the in-memory caches' first look at a principal's usage buckets or a
  client's implicit run (once per key per process; on the loop, see docs/store.md).

A process's view of a session is the stored row plus the deltas it has not written yet, read and
combined under one lock with the counting itself, so a count is never lost nor counted twice in the
view. With ``write_through`` (several processes share the database) a call also waits until its
counts are written before it answers, so the next call, on any process, sees them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gateway.core.clock import now_rfc3339
from gateway.core.errors import StoreUnavailable
from gateway.core.limits import (
    DEFAULT_RUN_IDLE_SECONDS,
    MAX_CACHED_SESSIONS,
    SESSION_READ_ATTEMPTS,
    SESSION_WRITE_WAIT_SECONDS,
    STORE_READY_CACHE_SECONDS,
    STORE_READY_TIMEOUT_SECONDS,
    STORE_WRITE_COALESCE_SECONDS,
    STORE_WRITE_RETRY_SECONDS,
)
from gateway.store.db import DB_ERRORS, Db
from gateway.store.delta import Delta, Row, apply
from gateway.store.implicit_runs import ImplicitRuns
from gateway.store.model import SessionState
from gateway.store.usage import Totals, UsageCounter

__all__ = ["SqlStore"]

log = logging.getLogger("gateway.store")

T = TypeVar("T")

_COLUMNS = "started_at, calls, calls_by_tool, rejected, terminated, terminate_message, implicit, client"

# Sessions keyed by id alone (before sessions belonged to principals) live under this owner, which
# no principal has: the rows are only ever copied from, when a principal first names one.
UNOWNED = ""


class SqlStore:
    """Sessions in a SQL database; safe to share between the event loop and worker threads."""

    def __init__(self, connect: Callable[[], Db], where: str, *, usage_windows: Mapping[str, float] | None = None,
                 idle_timeout: float = DEFAULT_RUN_IDLE_SECONDS, write_through: bool = False) -> None:
        self.where = where  # the database, as messages name it (never a password)
        self.instance_id = uuid.uuid4().hex  # this process's name on the claims it makes
        self.write_through = write_through
        # Writes behind wait a moment to gather more counts; a write-through call waits for its write, so not then.
        self.coalesce = 0.0 if write_through else STORE_WRITE_COALESCE_SECONDS
        self.transactions = 0  # writes of counts committed so far
        self.row_reads = 0  # session rows read so far (on the reader thread)
        self._connect = connect
        self._loader = connect()  # the caches' first look at a key
        try:
            self._migrate(self._loader)
        except BaseException:
            self._loader.close()
            raise
        self._lock = threading.Lock()
        self._reader = connect()
        self._read_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-reads")
        self._writer = connect()  # approvals, on their worker thread
        self._writer_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-db")
        self._session_writer = connect()  # session rows, written behind on their own thread
        self._session_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-sessions")
        # Guards what follows, the cached sessions' counters and the usage totals (re-entered: counting a
        # call counts its usage bucket too).
        self._dirty_lock = threading.RLock()
        self._pending: dict[tuple[str, str], Delta] = {}  # session deltas not written yet
        self._in_flight: dict[tuple[str, str], Delta] = {}  # being written right now
        self._usage: dict[tuple[str, int, str], list[int]] = {}  # usage bucket increments: [calls, rejected]
        self._usage_in_flight: dict[tuple[str, int, str], list[int]] = {}
        self._dirty: dict[tuple[str, ...], tuple[str, tuple[Any, ...]]] = {}  # other rows: newest statement each
        self._writes = 0  # writes of counts begun or ended so far (a read that overlaps one is read again)
        self._written = threading.Condition(self._dirty_lock)  # told when a write ends
        self._flush_queued = False
        self._closing = False
        self._sessions: dict[tuple[str, str], SessionState] = {}
        self._pruned_bucket = 0
        self.usage = UsageCounter(usage_windows or {}, self._usage_changed, self._usage_rows)
        self.implicit_runs = ImplicitRuns(idle_timeout, self._implicit_changed, self._implicit_row)
        self._probe: asyncio.Future[None] | None = None  # the readiness probe under way, if any
        self._probed: tuple[float, str | None] = (-STORE_READY_CACHE_SECONDS, None)  # when, and its answer

    def _migrate(self, db: Db) -> None:
        """Bring the sessions' tables up to this code's schema (see migrations.py)."""
        raise NotImplementedError

    @property
    def connection(self) -> Db:
        """The approvals' connection, for stores that add their own tables (hold ``lock``; use from ``run``)."""
        return self._writer

    @property
    def lock(self) -> threading.Lock:
        """The lock that guards ``connection``."""
        return self._writer_lock

    def listen(self, channel: str, wake: Callable[[str], None]) -> bool:
        """Call ``wake(payload)`` (from a thread) for each notification on ``channel``; False if this
        database cannot push them (then waiters poll)."""
        return False

    async def unreachable(self) -> str | None:
        """Why a call's session read would fail now (a short reason, no address), or None when the database
        answers; for ``/readyz``. Asked on the reader thread, as every call's read is, at most once per
        ``STORE_READY_CACHE_SECONDS`` however often it is asked (the probe is open to anyone)."""
        loop = asyncio.get_running_loop()
        at, why = self._probed
        if loop.time() - at < STORE_READY_CACHE_SECONDS:
            return why
        if self._probe is None or self._probe.done():
            self._probe = loop.run_in_executor(self._read_worker, self._ping)
        try:
            async with asyncio.timeout(STORE_READY_TIMEOUT_SECONDS):  # not wait_for: it can lose a cancel
                await asyncio.shield(self._probe)
            why = None
        except DB_ERRORS as exc:
            log.warning("the store is unreachable: %s", exc)
            why = "not reachable"
        except TimeoutError:
            why = "not answering"
        except RuntimeError:  # the reader was shut down: the gateway is stopping
            why = "closed"
        self._probed = (loop.time(), why)
        return why

    def _ping(self) -> None:
        self._reader.execute("SELECT 1").fetchone()

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run blocking database work on the store's worker thread, and await its result."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, work, *args)

    def close(self) -> None:
        """Finish queued writes (one more try each), then close the database."""
        with self._dirty_lock:
            self._closing = True
        self._session_worker.shutdown(wait=True)
        self._read_worker.shutdown(wait=True)
        self._worker.shutdown(wait=True)
        self._session_writer.close()
        self._reader.close()
        with self._writer_lock:
            self._writer.close()
        with self._lock:
            self._loader.close()

    # -- sessions ---------------------------------------------------------------------------------

    async def session(self, principal: str, session_id: str, client: str | None = None) -> SessionState:
        """The principal's session of that id as the database has it now (created on first sight;
        implicit when ``client`` is given); ``StoreUnavailable`` if it cannot be read.

        A store only this process writes (not ``write_through``: no ``--workers``, not ``store.shared``, not
        PostgreSQL) reads a session's row once, at first sight: every count, termination, reset and end of
        it after that is made here, on the state it keeps, so that state is the row plus what is not written
        yet without asking the database again (and without a trip to the reader thread per call).
        """
        if not self.write_through:
            with self._dirty_lock:
                held = self._sessions.get((principal, session_id))
            if held is not None:
                return held
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._read_worker, self._refresh, principal, session_id, client)
        except RuntimeError:  # the reader was shut down: the gateway is stopping
            return self._refreshed(principal, session_id, client, None)

    def _refresh(self, principal: str, session_id: str, client: str | None) -> SessionState:
        """Read the row and combine it with this process's unwritten deltas (on the reader thread).

        The combination is exact when no write of this process's counts began or ended during the
        read and none of this session's deltas was being written when it began; otherwise it reads
        again (after waiting for a write under way). A writer stuck on a locked database leaves the
        view this process has, which is right for its own counts.
        """
        key = (principal, session_id)
        row = None
        for _ in range(SESSION_READ_ATTEMPTS):
            with self._written:
                if key in self._in_flight:
                    self._written.wait(SESSION_WRITE_WAIT_SECONDS)
                writes, settled = self._writes, key not in self._in_flight
            try:
                row = self._read_row(self._reader, principal, session_id)
            except DB_ERRORS as exc:  # fail closed: a run whose counts cannot be read is not run
                raise StoreUnavailable(f"the sessions database is unavailable ({exc})") from exc
            with self._dirty_lock:
                if not settled and key in self._sessions:
                    return self._sessions[key]
                if not settled or self._writes == writes:
                    return self._refreshed_locked(principal, session_id, client, row)
        with self._dirty_lock:
            if key in self._sessions and row is not None:
                return self._sessions[key]  # writes kept overlapping the reads: this process's view stands
            return self._refreshed_locked(principal, session_id, client, row)

    def _refreshed(self, principal: str, session_id: str, client: str | None,
                   row: tuple[Any, ...] | None) -> SessionState:
        with self._dirty_lock:
            return self._refreshed_locked(principal, session_id, client, row)

    def _refreshed_locked(self, principal: str, session_id: str, client: str | None,
                          row: tuple[Any, ...] | None) -> SessionState:
        """The cached state made the stored row plus this process's unwritten deltas (hold ``_dirty_lock``)."""
        key = (principal, session_id)
        state = self._sessions.get(key)
        if row is None and state is not None:
            return state  # its row is not written yet (or could not be read): this process's view stands
        if row is None:  # first sight: a copy of an unowned row from before owners, else a fresh session
            row = self._unowned_row(session_id) or (now_rfc3339(), 0, "{}", 0, 0, None, int(client is not None),
                                                    client)
            created = Delta(tuple(row))
            waiting = self._pending.get(key)
            self._pending[key] = created.then(waiting) if waiting is not None else created
            self._schedule_flush()
            in_flight = None
        else:
            in_flight = self._in_flight.get(key)
        base: Row = (int(row[1]), json.loads(row[2]), int(row[3]), bool(row[4]), row[5])
        if state is None:
            state = SessionState(session_id, row[0], principal=principal, implicit=bool(row[6]), client=row[7])
        view = apply(apply(base, in_flight), self._pending.get(key))
        state.calls, state.calls_by_tool, state.rejected, state.terminated, state.terminate_message = \
            view[0], dict(view[1]), view[2], view[3], view[4]
        if key not in self._sessions and len(self._sessions) >= MAX_CACHED_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[key] = state
        return state

    def _unowned_row(self, session_id: str) -> tuple[Any, ...] | None:
        """A session row from before sessions had owners (see sqlite.py), to start a principal's copy from."""
        return None

    def _read_row(self, db: Db, principal: str, session_id: str) -> tuple[Any, ...] | None:
        self.row_reads += 1
        row = db.execute(f"SELECT {_COLUMNS} FROM sessions WHERE principal = ? AND id = ?",
                         (principal, session_id)).fetchone()
        return None if row is None else tuple(row)

    def _delta(self, state: SessionState) -> Delta:
        """The session's unwritten delta, made if there is none (hold ``_dirty_lock``)."""
        key = (state.principal, state.id)
        found = self._pending.get(key)
        if found is None:
            found = self._pending[key] = Delta(_created(state))
        self._schedule_flush()
        return found

    def count_call(self, state: SessionState, tool: str) -> None:
        """Count one call for the session, in memory at once (concurrent calls see it), written behind."""
        with self._dirty_lock:
            state.calls += 1
            state.calls_by_tool[tool] = state.calls_by_tool.get(tool, 0) + 1
            delta = self._delta(state)
            delta.calls += 1
            delta.by_tool[tool] = delta.by_tool.get(tool, 0) + 1
            self.usage.count_call(state.principal, tool)

    def record_outcome(self, state: SessionState, *, rejected: bool, terminate_message: str | None = None,
                       tool: str = "") -> None:
        """Count a rejection or a termination."""
        with self._dirty_lock:
            delta = self._delta(state)
            if rejected:
                state.rejected += 1
                delta.rejected += 1
            if terminate_message is not None and not state.terminated:
                state.terminated, state.terminate_message = True, terminate_message
                delta.terminate = delta.terminate or terminate_message
            if rejected:
                self.usage.count_rejected(state.principal, tool)

    def reset(self, state: SessionState) -> None:
        """Counters to zero, not terminated: the run goes on as if it had just started."""
        with self._dirty_lock:
            state.calls, state.calls_by_tool, state.rejected = 0, {}, 0
            state.terminated, state.terminate_message = False, None
            key = (state.principal, state.id)
            self._pending[key] = self._delta(state).then(Delta(_created(state), reset=True))

    def end(self, state: SessionState, message: str) -> None:
        """Terminate the run with ``message`` (replacing an earlier one); an implicit run is also no longer
        current, so its client's next call starts a new one."""
        with self._dirty_lock:
            state.terminated, state.terminate_message = True, message
            self._delta(state).end = message
        if state.implicit:
            self.implicit_runs.end(state.principal, state.id)
            self._write_behind(("implicit-end", state.principal, state.id), _END_IMPLICIT, (state.principal, state.id))

    async def find_session(self, principal: str, session_id: str) -> SessionState | None:
        """The session if it exists (never creates one)."""
        if (principal, session_id) in self._sessions:
            return await self.session(principal, session_id)
        loop = asyncio.get_running_loop()
        try:
            row = await loop.run_in_executor(self._read_worker, self._read_row, self._reader, principal, session_id)
        except DB_ERRORS as exc:
            raise StoreUnavailable(f"the sessions database is unavailable ({exc})") from exc
        return None if row is None else await self.session(principal, session_id)

    def list_sessions(self, principal: str | None, implicit: bool | None, terminated: bool | None,
                      limit: int, offset: int) -> tuple[list[SessionState], int]:
        """One page of sessions, newest first, and how many match (call through ``run`` after ``flushed``);
        ``StoreUnavailable`` if they cannot be read."""
        try:
            return self._list_sessions(principal, implicit, terminated, limit, offset)
        except DB_ERRORS as exc:
            raise StoreUnavailable(f"the sessions database is unavailable ({exc})") from exc

    def _list_sessions(self, principal: str | None, implicit: bool | None, terminated: bool | None,
                       limit: int, offset: int) -> tuple[list[SessionState], int]:
        where, params = [], []
        for column, value in (("principal", principal), ("implicit", implicit), ("terminated", terminated)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(int(value) if isinstance(value, bool) else value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._writer_lock:
            total = self._writer.execute(f"SELECT count(*) FROM sessions{clause}", params).fetchone()[0]
            rows = self._writer.execute(
                f"SELECT principal, id, {_COLUMNS} FROM sessions{clause}"
                " ORDER BY started_at DESC, principal, id LIMIT ? OFFSET ?", [*params, limit, offset]).fetchall()
        return [self._refreshed(r[0], r[1], None, tuple(r[2:])) for r in rows], int(total)

    async def flushed(self) -> None:
        """Wait until every row queued so far is written (before reading the tables directly)."""
        await asyncio.get_running_loop().run_in_executor(self._session_worker, self._flush)

    async def settle(self) -> None:
        """At the end of a call: with ``write_through``, wait until its counts are written."""
        if self.write_through:
            try:
                await self.flushed()
            except RuntimeError:  # the writer was shut down: the gateway is stopping
                return

    # -- usage buckets and implicit runs ------------------------------------------------------------

    async def usage_now(self, principal: str) -> dict[str, Totals]:
        """The principal's usage windows as the database has them now (every process's calls), plus this
        process's not written yet; read off the event loop. ``StoreUnavailable`` if they cannot be read."""
        if not self.usage.windows:
            return {}
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._read_worker, self._refresh_usage, principal)
        except RuntimeError:  # the reader was shut down: the gateway is stopping; this process's view stands
            pass
        with self._dirty_lock:
            return self.usage.snapshot(principal)

    def _refresh_usage(self, principal: str) -> None:
        """As ``_refresh``, for the principal's usage buckets."""
        for _ in range(SESSION_READ_ATTEMPTS):
            with self._written:
                if self._usage_writing(principal):
                    self._written.wait(SESSION_WRITE_WAIT_SECONDS)
                if self._usage_writing(principal):
                    return  # a writer stuck on a locked database: this process's view stands
                writes, after = self._writes, self.usage.oldest_kept()
            try:
                rows = self._reader.execute(
                    "SELECT bucket, tool, calls, rejected FROM usage WHERE principal = ? AND bucket > ?",
                    (principal, after)).fetchall()
            except DB_ERRORS as exc:  # fail closed, as for a session
                raise StoreUnavailable(f"the usage database is unavailable ({exc})") from exc
            with self._dirty_lock:
                if self._writes != writes:
                    continue  # a write of this process's counts began or ended during the read: read again
                merged = [(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]
                merged.extend((bucket, tool, counts[0], counts[1])
                              for (who, bucket, tool), counts in self._usage.items() if who == principal)
                self.usage.replace(principal, merged)
                return

    def _usage_writing(self, principal: str) -> bool:
        return any(key[0] == principal for key in self._usage_in_flight)

    def _write_behind(self, key: tuple[str, ...], statement: str, values: tuple[Any, ...]) -> None:
        """Queue one row's newest values to be written by the session worker."""
        with self._dirty_lock:
            self._dirty[key] = (statement, values)
            self._schedule_flush()

    def _usage_changed(self, principal: str, bucket: int, tool: str, calls: int, rejected: int) -> None:
        with self._dirty_lock:
            counts = self._usage.setdefault((principal, bucket, tool), [0, 0])
            counts[0] += calls
            counts[1] += rejected
            self._schedule_flush()
        if self.usage.longest and bucket > self._pruned_bucket:  # once a minute: drop buckets past every window
            self._pruned_bucket = bucket
            self._write_behind(("usage-prune",), _PRUNE_USAGE, (bucket - self.usage.longest,))

    def _usage_rows(self, principal: str, after: int) -> list[tuple[int, str, int, int]]:
        with self._lock:
            rows = self._loader.execute(
                "SELECT bucket, tool, calls, rejected FROM usage WHERE principal = ? AND bucket > ?",
                (principal, after)).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    async def implicit_run(self, principal: str, client: str, session: str | None = None) -> str:
        """The current implicit run of (principal, client) for a call of protocol ``session`` (if any); its
        first look here reads on the read worker."""
        if self.implicit_runs.cached(principal, client):
            return self.implicit_runs.run_for(principal, client, session=session)
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(self._read_worker, self._implicit_row, principal, client)
        # a pair cached meanwhile keeps its run
        return self.implicit_runs.run_for(principal, client, stored, session=session)

    def _implicit_changed(self, principal: str, client: str, run_id: str, last_call: float) -> None:
        self._write_behind(("implicit_runs", principal, client), _UPSERT_IMPLICIT,
                           (principal, client, run_id, last_call))

    def _implicit_row(self, principal: str, client: str) -> tuple[str, float] | None:
        with self._lock:
            row = self._loader.execute("SELECT run_id, last_call FROM implicit_runs WHERE principal = ? AND client = ?",
                                       (principal, client)).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    # -- writing behind ---------------------------------------------------------------------------

    def _schedule_flush(self) -> None:
        """Make sure one flush is queued (call holding ``_dirty_lock``)."""
        if self._flush_queued or self._closing:
            return
        self._flush_queued = True
        self._session_worker.submit(self._flush_later)

    def _flush_later(self) -> None:
        if self.coalesce:
            time.sleep(self.coalesce)
        self._flush()

    def _flush(self) -> None:
        with self._dirty_lock:
            self._flush_queued = False
            if not (self._pending or self._usage or self._dirty):
                return
            sessions, self._in_flight, self._pending = self._pending, self._pending, {}
            usage, self._usage_in_flight, self._usage = self._usage, self._usage, {}
            rows, self._dirty = self._dirty, {}
            self._writes += 1
        try:
            self._write(sessions, usage, rows)
        finally:
            with self._written:
                self._in_flight, self._usage_in_flight = {}, {}
                self._writes += 1
                self._written.notify_all()

    def _write(self, sessions: dict[tuple[str, str], Delta], usage: dict[tuple[str, int, str], list[int]],
               rows: dict[tuple[str, ...], tuple[str, tuple[Any, ...]]]) -> None:
        db = self._session_writer
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
            with self._dirty_lock:
                for key, delta in sessions.items():
                    later = self._pending.get(key)
                    self._pending[key] = delta.then(later) if later is not None else delta
                for ukey, (calls, rejected) in usage.items():
                    counts = self._usage.setdefault(ukey, [0, 0])
                    counts[0] += calls
                    counts[1] += rejected
                for rkey, row in rows.items():
                    self._dirty.setdefault(rkey, row)  # a newer state queued meanwhile wins
                self._in_flight, self._usage_in_flight = {}, {}
                self._schedule_flush()


def _created(state: SessionState) -> tuple[Any, ...]:
    """A fresh row's values for the session (counters at zero; the delta adds them)."""
    return (state.started_at, 0, "{}", 0, 0, None, int(state.implicit), state.client)


def _write_session(db: Db, key: tuple[str, str], delta: Delta) -> None:
    """Apply one session's delta to its row, under the row's lock: read, add, write."""
    db.execute(_CREATE_SESSION, (*key, *delta.created))
    if delta.empty:
        return
    row = db.execute(db.for_update("SELECT calls, calls_by_tool, rejected, terminated, terminate_message"
                                   " FROM sessions WHERE principal = ? AND id = ?"), key).fetchone()
    calls, by_tool, rejected, terminated, message = apply(
        (int(row[0]), json.loads(row[1]), int(row[2]), bool(row[3]), row[4]), delta)
    db.execute("UPDATE sessions SET calls = ?, calls_by_tool = ?, rejected = ?, terminated = ?, terminate_message = ?"
               " WHERE principal = ? AND id = ?",
               (calls, json.dumps(by_tool), rejected, int(terminated), message, *key))


_CREATE_SESSION = (f"INSERT INTO sessions (principal, id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                   " ON CONFLICT (principal, id) DO NOTHING")
_ADD_USAGE = ("INSERT INTO usage (principal, bucket, tool, calls, rejected) VALUES (?, ?, ?, ?, ?)"
              " ON CONFLICT (principal, bucket, tool) DO UPDATE SET calls = usage.calls + excluded.calls,"
              " rejected = usage.rejected + excluded.rejected")
_PRUNE_USAGE = "DELETE FROM usage WHERE bucket <= ?"
_UPSERT_IMPLICIT = ("INSERT INTO implicit_runs (principal, client, run_id, last_call) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (principal, client) DO UPDATE SET run_id = excluded.run_id,"
                    " last_call = excluded.last_call")
# An implicit run ended by an administrator: idle since the epoch, so its pair's next call starts a new run.
_END_IMPLICIT = "UPDATE implicit_runs SET last_call = 0 WHERE principal = ? AND run_id = ?"
