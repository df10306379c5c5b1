"""The embedded store: one SQLite file, WAL mode, two connections.

The event loop never waits for the database file. Reads of session rows use the loop's own
connection (in WAL mode a reader never waits for a writer); every write goes through one worker
thread that owns the second connection, with a busy timeout, so another process holding the file
locked delays the writes and never the loop. Session rows are written behind (the in-memory copy
is what calls read); approval work is awaited through ``run`` (see gateway/approvals/store.py).

Each process that opens the store gets an ``instance_id``: claims it makes on shared rows (an
approved call it is executing) carry it, so a second process on the same file can tell a live
claim from one whose owner died.

A session belongs to the principal that named it: rows are keyed by (principal, session id),
so one key naming another's session id gets a session of its own, never the other's counters.
A database from before that (sessions keyed by id alone) is migrated on open: its rows are kept
as unowned, and each principal that names one of those ids starts from a copy of its counters,
so a session terminated before the upgrade stays terminated for whoever used it.

A session (an agent run, see docs/runs.md) is ``implicit`` when the gateway made it up for a client
that named no run (gateway/store/implicit_runs.py); its ``client`` says which. The per-principal
usage windows (gateway/store/usage.py) are counted at the same moment as a session's calls, and
their minute buckets are written behind like session rows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from gateway.limits import DEFAULT_RUN_IDLE_SECONDS, MAX_CACHED_SESSIONS, SQLITE_BUSY_TIMEOUT_SECONDS
from gateway.store.implicit_runs import ImplicitRuns
from gateway.store.usage import UsageCounter

__all__ = ["SessionState", "SqliteStore"]

log = logging.getLogger("gateway.store")

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    principal TEXT NOT NULL,
    id TEXT NOT NULL,
    started_at TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    calls_by_tool TEXT NOT NULL DEFAULT '{}',
    rejected INTEGER NOT NULL DEFAULT 0,
    terminated INTEGER NOT NULL DEFAULT 0,
    terminate_message TEXT,
    implicit INTEGER NOT NULL DEFAULT 0,
    client TEXT,
    PRIMARY KEY (principal, id)
);
CREATE TABLE IF NOT EXISTS usage (
    principal TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    tool TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    rejected INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, bucket, tool)
);
CREATE TABLE IF NOT EXISTS implicit_runs (
    principal TEXT NOT NULL,
    client TEXT NOT NULL,
    run_id TEXT NOT NULL,
    last_call REAL NOT NULL,
    PRIMARY KEY (principal, client)
);
"""

# Columns added to `sessions` since it was first keyed by principal: added on open when missing.
_ADDED_COLUMNS = {"implicit": "INTEGER NOT NULL DEFAULT 0", "client": "TEXT"}

# Sessions keyed by id alone (before sessions belonged to principals) move under this owner,
# which no principal has: the rows are only ever copied from, when a principal first names one.
_UNOWNED = ""

_MIGRATE_UNOWNED = f"""
ALTER TABLE sessions RENAME TO sessions_unowned;
{_SCHEMA}
INSERT INTO sessions (principal, id, started_at, calls, calls_by_tool, rejected, terminated, terminate_message)
    SELECT '{_UNOWNED}', id, started_at, calls, calls_by_tool, rejected, terminated, terminate_message
    FROM sessions_unowned;
DROP TABLE sessions_unowned;
"""

_COLUMNS = "started_at, calls, calls_by_tool, rejected, terminated, terminate_message, implicit, client"


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339, as CEL's timestamp() reads it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class SessionState:
    """One agent session's counters."""

    id: str
    started_at: str
    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    terminated: bool = False
    terminate_message: str | None = None
    principal: str = ""  # whose session it is (sessions are keyed by principal and id)
    implicit: bool = False  # the gateway made this run up for a client that named none
    client: str | None = None  # for an implicit run: the client it was made for

    def to_dict(self) -> dict[str, Any]:
        """The session as the admin API shows it."""
        return {"principal": self.principal, "id": self.id, "implicit": self.implicit, "client": self.client,
                "started_at": self.started_at, "calls": self.calls, "calls_by_tool": dict(self.calls_by_tool),
                "rejected": self.rejected, "terminated": self.terminated, "terminate_message": self.terminate_message}


class SqliteStore:
    """Sessions in SQLite; safe to share between the event loop and worker threads."""

    def __init__(self, path: str | Path, busy_timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS, *,
                 usage_windows: Mapping[str, float] | None = None,
                 idle_timeout: float = DEFAULT_RUN_IDLE_SECONDS) -> None:
        self.path = str(path)
        self.instance_id = uuid.uuid4().hex  # this process's name on the claims it makes
        target, uri = self.path, False
        if self.path == ":memory:":  # the connections must see one database
            target, uri = f"file:gateway-{self.instance_id}?mode=memory&cache=shared", True
        else:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)

        def connect() -> sqlite3.Connection:
            db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, uri=uri,
                                 timeout=busy_timeout)
            db.execute("PRAGMA synchronous=NORMAL")
            return db

        self._db = connect()  # session reads, on the event loop (a WAL reader never waits)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._migrate()
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._writer = connect()  # approvals, on their worker thread
        self._writer_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-db")
        self._session_writer = connect()  # session rows, written behind on their own thread
        self._session_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-sessions")
        # rows to write behind, by (table, key...): the newest (statement, values) of each
        self._dirty: dict[tuple[str, ...], tuple[str, tuple[Any, ...]]] = {}
        self._dirty_lock = threading.Lock()
        self._flush_queued = False
        self._closing = False
        self._sessions: dict[tuple[str, str], SessionState] = {}
        self._pruned_bucket = 0
        self.usage = UsageCounter(usage_windows or {}, self._usage_changed, self._usage_rows)
        self.implicit_runs = ImplicitRuns(idle_timeout, self._implicit_changed, self._implicit_row)

    def _migrate(self) -> None:
        """Sessions keyed by id alone become unowned rows (see the module docstring)."""
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(sessions)")]
        if columns and "principal" not in columns:
            self._db.executescript(f"BEGIN IMMEDIATE;{_MIGRATE_UNOWNED}COMMIT;")
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(sessions)")]
        for name, kind in _ADDED_COLUMNS.items():
            if columns and name not in columns:
                self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")

    @property
    def connection(self) -> sqlite3.Connection:
        """The approvals' connection, for stores that add their own tables (hold ``lock``; use from ``run``)."""
        return self._writer

    @property
    def lock(self) -> threading.Lock:
        """The lock that guards ``connection``."""
        return self._writer_lock

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run blocking database work on the store's worker thread, and await its result."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, work, *args)

    def close(self) -> None:
        """Finish queued writes (one more try each), then close the database."""
        with self._dirty_lock:
            self._closing = True
        self._session_worker.shutdown(wait=True)
        self._worker.shutdown(wait=True)
        self._session_writer.close()
        with self._writer_lock:
            self._writer.close()
        with self._lock:
            self._db.close()

    def session(self, principal: str, session_id: str, client: str | None = None) -> SessionState:
        """The principal's session of that id, created on first sight (implicit when ``client`` is given)."""
        key = (principal, session_id)
        found = self._sessions.get(key)
        if found is not None:
            return found
        select = f"SELECT {_COLUMNS} FROM sessions WHERE principal = ? AND id = ?"
        with self._lock:
            row = self._db.execute(select, key).fetchone()
            new = row is None
            if new:  # an unowned row from before the migration, else a fresh session
                row = self._db.execute(select, (_UNOWNED, session_id)).fetchone() or \
                    (now_rfc3339(), 0, "{}", 0, 0, None, int(client is not None), client)
        state = SessionState(session_id, row[0], row[1], json.loads(row[2]), row[3], bool(row[4]), row[5], principal,
                             bool(row[6]), row[7])
        if new:
            self._save(state)
        if len(self._sessions) >= MAX_CACHED_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[key] = state
        return state

    def count_call(self, state: SessionState, tool: str) -> None:
        """Count one call for the session, in memory at once (concurrent calls see it)."""
        state.calls += 1
        state.calls_by_tool[tool] = state.calls_by_tool.get(tool, 0) + 1
        self.usage.count_call(state.principal, tool)

    def record_outcome(self, state: SessionState, *, rejected: bool, terminate_message: str | None = None,
                       tool: str = "") -> None:
        """Count a rejection or a termination, and persist the session."""
        if rejected:
            state.rejected += 1
            self.usage.count_rejected(state.principal, tool)
        if terminate_message is not None and not state.terminated:
            state.terminated = True
            state.terminate_message = terminate_message
        self._save(state)

    def _save(self, state: SessionState) -> None:
        """Queue the session's row to be written behind; the in-memory copy is what calls read.

        Writes of one session are coalesced to its newest state, so a locked file delays them
        without growing a queue.
        """
        values: tuple[Any, ...] = (state.principal, state.id, state.started_at, state.calls,
                                   json.dumps(state.calls_by_tool), state.rejected, int(state.terminated),
                                   state.terminate_message, int(state.implicit), state.client)
        self._write_behind(("sessions", state.principal, state.id), _UPSERT_SESSION, values)

    def _write_behind(self, key: tuple[str, ...], statement: str, values: tuple[Any, ...]) -> None:
        """Queue one row's newest values to be written by the session worker."""
        with self._dirty_lock:
            self._dirty[key] = (statement, values)
            self._schedule_flush()

    def _usage_changed(self, principal: str, bucket: int, tool: str, calls: int, rejected: int) -> None:
        self._write_behind(("usage", principal, str(bucket), tool), _UPSERT_USAGE,
                           (principal, bucket, tool, calls, rejected))
        if self.usage.longest and bucket > self._pruned_bucket:  # once a minute: drop buckets past every window
            self._pruned_bucket = bucket
            self._write_behind(("usage-prune",), _PRUNE_USAGE, (bucket - self.usage.longest,))

    def _usage_rows(self, principal: str, after: int) -> list[tuple[int, str, int, int]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT bucket, tool, calls, rejected FROM usage WHERE principal = ? AND bucket > ?",
                (principal, after)).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    def _implicit_changed(self, principal: str, client: str, run_id: str, last_call: float) -> None:
        self._write_behind(("implicit_runs", principal, client), _UPSERT_IMPLICIT,
                           (principal, client, run_id, last_call))

    def _implicit_row(self, principal: str, client: str) -> tuple[str, float] | None:
        with self._lock:
            row = self._db.execute("SELECT run_id, last_call FROM implicit_runs WHERE principal = ? AND client = ?",
                                   (principal, client)).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    async def flushed(self) -> None:
        """Wait until every row queued so far is written (before reading the tables directly)."""
        await asyncio.get_running_loop().run_in_executor(self._session_worker, self._flush)

    def reset(self, state: SessionState) -> None:
        """Counters to zero, not terminated: the run goes on as if it had just started."""
        state.calls, state.calls_by_tool, state.rejected = 0, {}, 0
        state.terminated, state.terminate_message = False, None
        self._save(state)

    def end(self, state: SessionState, message: str) -> None:
        """Terminate the run with ``message`` (replacing an earlier one); an implicit run is also no longer
        current, so its client's next call starts a new one."""
        state.terminated, state.terminate_message = True, message
        self._save(state)
        if state.implicit:
            self.implicit_runs.end(state.principal, state.id)
            self._write_behind(("implicit-end", state.principal, state.id), _END_IMPLICIT, (state.principal, state.id))

    def find_session(self, principal: str, session_id: str) -> SessionState | None:
        """The session if it exists (never creates one)."""
        found = self._sessions.get((principal, session_id))
        if found is not None:
            return found
        with self._lock:
            row = self._db.execute("SELECT 1 FROM sessions WHERE principal = ? AND id = ?",
                                   (principal, session_id)).fetchone()
        return None if row is None else self.session(principal, session_id)

    def list_sessions(self, principal: str | None, implicit: bool | None, terminated: bool | None,
                      limit: int, offset: int) -> tuple[list[SessionState], int]:
        """One page of sessions, newest first, and how many match (call after ``flushed``; blocking)."""
        where, params = [], []
        for column, value in (("principal", principal), ("implicit", implicit), ("terminated", terminated)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(int(value) if isinstance(value, bool) else value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._writer_lock:
            total = self._writer.execute(f"SELECT count(*) FROM sessions{clause}", params).fetchone()[0]
            keys = self._writer.execute(
                f"SELECT principal, id FROM sessions{clause} ORDER BY started_at DESC, principal, id LIMIT ? OFFSET ?",
                [*params, limit, offset]).fetchall()
        return [self._sessions.get((p, i)) or self._read(p, i) for p, i in keys], int(total)

    def _read(self, principal: str, session_id: str) -> SessionState:
        with self._writer_lock:
            row = self._writer.execute(f"SELECT {_COLUMNS} FROM sessions WHERE principal = ? AND id = ?",
                                       (principal, session_id)).fetchone()
        return SessionState(session_id, row[0], row[1], json.loads(row[2]), row[3], bool(row[4]), row[5], principal,
                            bool(row[6]), row[7])

    def _schedule_flush(self) -> None:
        """Make sure one flush is queued (call holding ``_dirty_lock``)."""
        if self._flush_queued or self._closing:
            return
        self._flush_queued = True
        self._session_worker.submit(self._flush)

    def _flush(self) -> None:
        with self._dirty_lock:
            rows, self._dirty, self._flush_queued = dict(self._dirty), {}, False
        if not rows:
            return
        try:
            self._session_writer.execute("BEGIN IMMEDIATE")
            for statement, values in rows.values():
                self._session_writer.execute(statement, values)
            self._session_writer.execute("COMMIT")
        except sqlite3.Error as exc:  # locked past the busy timeout: keep the rows and try again
            if self._session_writer.in_transaction:
                self._session_writer.execute("ROLLBACK")
            log.warning("%d session rows not saved yet: %s", len(rows), exc)
            with self._dirty_lock:
                for key, row in rows.items():
                    self._dirty.setdefault(key, row)  # a newer state queued meanwhile wins
                self._schedule_flush()


_UPSERT_SESSION = (
    f"INSERT INTO sessions (principal, id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(principal, id) DO UPDATE SET calls = excluded.calls,"
    " calls_by_tool = excluded.calls_by_tool, rejected = excluded.rejected,"
    " terminated = excluded.terminated, terminate_message = excluded.terminate_message")
_UPSERT_USAGE = ("INSERT INTO usage (principal, bucket, tool, calls, rejected) VALUES (?, ?, ?, ?, ?)"
                 " ON CONFLICT(principal, bucket, tool) DO UPDATE SET calls = excluded.calls,"
                 " rejected = excluded.rejected")
_PRUNE_USAGE = "DELETE FROM usage WHERE bucket <= ?"
_UPSERT_IMPLICIT = ("INSERT INTO implicit_runs (principal, client, run_id, last_call) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(principal, client) DO UPDATE SET run_id = excluded.run_id,"
                    " last_call = excluded.last_call")
# An implicit run ended by an administrator: idle since the epoch, so its pair's next call starts a new run.
_END_IMPLICIT = "UPDATE implicit_runs SET last_call = 0 WHERE principal = ? AND run_id = ?"
