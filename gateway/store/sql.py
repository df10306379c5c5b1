"""Sessions, usage windows and implicit runs in a SQL database; the part SQLite and PostgreSQL share.

Four connections, each with its own use, so the event loop never waits for the database:

- the *reader* (a worker thread) reads a session's row at the start of each call, so counts and
  terminations made by other processes are seen;
- the *session writer* (a worker thread) writes counters behind, as increments (write_behind.py, delta.py);
- the *approvals* connection (a worker thread, ``run``) does approval work and listings;
- the *admission* connection (a worker thread) decides and counts tallied calls (admission.py);
- the *loader* answers the in-memory caches' first look at a principal's usage buckets or a
  client's implicit run (once per key per process; on the loop, see docs/store.md).

A process's view of a session is the stored row plus the deltas it has not written yet, read and
combined under one lock with the counting itself, so a count is never lost nor counted twice in the
view. With ``write_through`` (several processes share the database) a call also waits until its
counts are written before it answers, so the next call, on any process, sees them. Usage windows and
implicit runs are read and written the same way (sql_usage.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
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
)
from gateway.policy.flow import HistoryEntry, Tallies, TallyChange, appended_history, merged_labels
from gateway.store.admission import Admission
from gateway.store.db import DB_ERRORS, Db
from gateway.store.delta import Delta, apply, parsed, with_labels
from gateway.store.model import SessionState, TallyView
from gateway.store.sql_usage import SqlUsage
from gateway.store.usage import Totals
from gateway.store.write_behind import COLUMNS, WriteBehind, created

__all__ = ["SqlStore"]

log = logging.getLogger("gateway.store")

T = TypeVar("T")

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
        # Counts and rows not written yet, written behind on their own thread and connection; its lock also
        # guards the cached sessions' counters and the usage totals.
        self.write_behind = WriteBehind(connect(), write_through=write_through)
        self._sessions: dict[tuple[str, str], SessionState] = {}  # guarded by the queue's lock
        self.sql_usage = SqlUsage(self.write_behind, self._reader, self._read_worker, self._loader, self._lock,
                                  usage_windows=usage_windows or {}, idle_timeout=idle_timeout)
        self.usage = self.sql_usage.usage
        self.admission = Admission(connect(), self.write_behind, self._reader, self._read_worker,
                                   windows=self.usage.windows, write_through=write_through)
        self.implicit_runs = self.sql_usage.implicit_runs
        self._probe: asyncio.Future[None] | None = None  # the readiness probe under way, if any
        self._probed: tuple[float, str | None] = (-STORE_READY_CACHE_SECONDS, None)  # when, and its answer

    def _migrate(self, db: Db) -> None:
        """Bring the sessions' tables up to this code's schema (see migrations.py)."""
        raise NotImplementedError

    def connect_new(self) -> Db:
        """A connection of its own, for a component that keeps one (the console's table, gateway/store/decisions.py)."""
        return self._connect()

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
        self.admission.close()
        self.write_behind.close()
        self._read_worker.shutdown(wait=True)
        self._worker.shutdown(wait=True)
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
            with self.write_behind.lock:
                held = self._sessions.get((principal, session_id))
            if held is not None:
                return held
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._read_worker, self._refresh, principal, session_id, client)
        except RuntimeError:  # the reader was shut down: the gateway is stopping
            return self._refreshed(principal, session_id, client, None, self.admission.ended)

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
            with self.write_behind.written:
                if key in self.write_behind.in_flight:
                    self.write_behind.written.wait(SESSION_WRITE_WAIT_SECONDS)
                writes, settled = self.write_behind.writes, key not in self.write_behind.in_flight
                admitted = self.admission.ended
            try:
                row = self._read_row(self._reader, principal, session_id)
            except DB_ERRORS as exc:  # fail closed: a run whose counts cannot be read is not run
                raise StoreUnavailable(f"the sessions database is unavailable ({exc})") from exc
            with self.write_behind.lock:
                if not settled and key in self._sessions:
                    return self._sessions[key]
                if not settled or self.write_behind.writes == writes:
                    return self._refreshed_locked(principal, session_id, client, row, admitted)
        with self.write_behind.lock:
            if key in self._sessions and row is not None:
                return self._sessions[key]  # writes kept overlapping the reads: this process's view stands
            return self._refreshed_locked(principal, session_id, client, row, admitted)

    def _refreshed(self, principal: str, session_id: str, client: str | None,
                   row: tuple[Any, ...] | None, admitted: int) -> SessionState:
        with self.write_behind.lock:
            return self._refreshed_locked(principal, session_id, client, row, admitted)

    def _refreshed_locked(self, principal: str, session_id: str, client: str | None,
                          row: tuple[Any, ...] | None, admitted: int) -> SessionState:
        """The cached state made the stored row plus this process's unwritten deltas (hold the queue's ``lock``);
        a held state's tallies only if no admission ended since the row was read (``admitted``: the count then),
        else the admission's, which are as new."""
        key = (principal, session_id)
        state = self._sessions.get(key)
        if row is None and state is not None:
            return state  # its row is not written yet (or could not be read): this process's view stands
        if row is None:  # first sight: a copy of an unowned row from before owners, else a fresh session
            row = self._unowned_row(session_id) or (now_rfc3339(), 0, "{}", 0, 0, None, int(client is not None),
                                                    client, "[]", "[]", "{}")
            first = Delta(tuple(row))
            waiting = self.write_behind.pending.get(key)
            self.write_behind.pending[key] = first.then(waiting) if waiting is not None else first
            self.write_behind.schedule()
            in_flight = None
        else:
            in_flight = self.write_behind.in_flight.get(key)
        held = state is not None
        if state is None:
            state = SessionState(session_id, row[0], principal=principal, implicit=bool(row[6]), client=row[7])
        view = apply(apply(parsed((*row[1:6], *row[8:11])), in_flight), self.write_behind.pending.get(key))
        state.calls, state.calls_by_tool, state.rejected, state.terminated, state.terminate_message = \
            view.calls, dict(view.by_tool), view.rejected, view.terminated, view.message
        state.labels, state.history = view.labels, view.history
        if not held or admitted == self.admission.ended:
            state.tallies = view.tallies
        if key not in self._sessions and len(self._sessions) >= MAX_CACHED_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[key] = state
        return state

    def _unowned_row(self, session_id: str) -> tuple[Any, ...] | None:
        """A session row from before sessions had owners (see sqlite.py), to start a principal's copy from."""
        return None

    def _read_row(self, db: Db, principal: str, session_id: str) -> tuple[Any, ...] | None:
        self.row_reads += 1
        row = db.execute(f"SELECT {COLUMNS} FROM sessions WHERE principal = ? AND id = ?",
                         (principal, session_id)).fetchone()
        return None if row is None else tuple(row)

    def _delta(self, state: SessionState) -> Delta:
        """The session's unwritten delta, made if there is none (hold the queue's ``lock``)."""
        key = (state.principal, state.id)
        found = self.write_behind.pending.get(key)
        if found is None:
            found = self.write_behind.pending[key] = Delta(created(state))
        self.write_behind.schedule()
        return found

    def count_call(self, state: SessionState, tool: str) -> None:
        """Count one call for the session, in memory at once (concurrent calls see it), written behind."""
        with self.write_behind.lock:
            state.calls += 1
            state.calls_by_tool[tool] = state.calls_by_tool.get(tool, 0) + 1
            delta = self._delta(state)
            delta.calls += 1
            delta.by_tool[tool] = delta.by_tool.get(tool, 0) + 1
            self.usage.count_call(state.principal, tool)

    def record_outcome(self, state: SessionState, *, rejected: bool, terminate_message: str | None = None,
                       tool: str = "") -> None:
        """Count a rejection or a termination."""
        with self.write_behind.lock:
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
        """Counters to zero, not terminated, no labels, tallies nor history: the run goes on as if it had just
        started (the principal's window tallies are kept)."""
        with self.write_behind.lock:
            state.calls, state.calls_by_tool, state.rejected = 0, {}, 0
            state.labels, state.tallies, state.history = [], Tallies(), []
            state.terminated, state.terminate_message = False, None
            key = (state.principal, state.id)
            self.write_behind.pending[key] = self._delta(state).then(Delta(created(state), reset=True))

    def add_labels(self, state: SessionState, labels: Sequence[str]) -> None:
        """Add labels to the run, in memory at once, written behind; ``LabelOverflow`` (nothing added) past the cap."""
        with self.write_behind.lock:
            merged = merged_labels(state.labels, labels)
            if len(merged) > len(state.labels):
                delta = self._delta(state)
                delta.labels = with_labels(delta.labels, merged[len(state.labels):])
                state.labels = merged

    def add_history(self, state: SessionState, entry: HistoryEntry) -> None:
        """Append an entry to the run's history (the newest ``RUN_HISTORY_KEPT``): in memory at once, written behind."""
        with self.write_behind.lock:
            state.history = appended_history(state.history, entry)
            delta = self._delta(state)
            delta.history = appended_history(delta.history, entry)

    async def admit(self, state: SessionState, judge: Callable[[TallyView], tuple[T, TallyChange | None]]) -> T:
        """Decide a tallied call and count what it adds, in one transaction (see ``Admission.admit``)."""
        return await self.admission.admit(state, judge)

    async def window_tallies(self, principal: str) -> dict[str, Tallies]:
        """The principal's tallies per usage window (see ``Admission.window_tallies``)."""
        return await self.admission.window_tallies(principal)

    def end(self, state: SessionState, message: str) -> None:
        """Terminate the run with ``message`` (replacing an earlier one); an implicit run is also no longer
        current, so its client's next call starts a new one."""
        with self.write_behind.lock:
            state.terminated, state.terminate_message = True, message
            self._delta(state).end = message
        if state.implicit:
            self.sql_usage.end_run(state.principal, state.id)

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
            admitted = self.admission.ended
            total = self._writer.execute(f"SELECT count(*) FROM sessions{clause}", params).fetchone()[0]
            rows = self._writer.execute(
                f"SELECT principal, id, {COLUMNS} FROM sessions{clause}"
                " ORDER BY started_at DESC, principal, id LIMIT ? OFFSET ?", [*params, limit, offset]).fetchall()
        return [self._refreshed(r[0], r[1], None, tuple(r[2:]), admitted) for r in rows], int(total)

    async def flushed(self) -> None:
        """Wait until every row queued so far is written (before reading the tables directly)."""
        await self.write_behind.flushed()

    async def settle(self) -> None:
        """At the end of a call: with ``write_through``, wait until its counts are written."""
        if self.write_through:
            try:
                await self.flushed()
            except RuntimeError:  # the writer was shut down: the gateway is stopping
                return

    # -- usage windows and implicit runs (sql_usage.py) ------------------------------------------------

    async def usage_now(self, principal: str) -> dict[str, Totals]:
        """The principal's usage windows as the database has them now (see ``SqlUsage.now``)."""
        return await self.sql_usage.now(principal)

    async def implicit_run(self, principal: str, client: str, session: str | None = None) -> str:
        """The current implicit run of (principal, client) (see ``SqlUsage.implicit_run``)."""
        return await self.sql_usage.implicit_run(principal, client, session)

