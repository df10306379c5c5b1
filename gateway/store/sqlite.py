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
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from gateway.limits import MAX_CACHED_SESSIONS, SQLITE_BUSY_TIMEOUT_SECONDS

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
    PRIMARY KEY (principal, id)
);
"""

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

_COLUMNS = "started_at, calls, calls_by_tool, rejected, terminated, terminate_message"


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


class SqliteStore:
    """Sessions in SQLite; safe to share between the event loop and worker threads."""

    def __init__(self, path: str | Path, busy_timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS) -> None:
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
        self._dirty: dict[tuple[str, str], tuple[Any, ...]] = {}  # session rows to write; the newest state of each
        self._dirty_lock = threading.Lock()
        self._flush_queued = False
        self._closing = False
        self._sessions: dict[tuple[str, str], SessionState] = {}

    def _migrate(self) -> None:
        """Sessions keyed by id alone become unowned rows (see the module docstring)."""
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(sessions)")]
        if columns and "principal" not in columns:
            self._db.executescript(f"BEGIN IMMEDIATE;{_MIGRATE_UNOWNED}COMMIT;")

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

    def session(self, principal: str, session_id: str) -> SessionState:
        """The principal's session of that id, created on first sight."""
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
                    (now_rfc3339(), 0, "{}", 0, 0, None)
        state = SessionState(session_id, row[0], row[1], json.loads(row[2]), row[3], bool(row[4]), row[5], principal)
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

    def record_outcome(self, state: SessionState, *, rejected: bool, terminate_message: str | None = None) -> None:
        """Count a rejection or a termination, and persist the session."""
        if rejected:
            state.rejected += 1
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
                                   state.terminate_message)
        with self._dirty_lock:
            self._dirty[(state.principal, state.id)] = values
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Make sure one flush is queued (call holding ``_dirty_lock``)."""
        if self._flush_queued or self._closing:
            return
        self._flush_queued = True
        self._session_worker.submit(self._flush)

    def _flush(self) -> None:
        with self._dirty_lock:
            rows, self._dirty, self._flush_queued = list(self._dirty.values()), {}, False
        try:
            self._session_writer.execute("BEGIN IMMEDIATE")
            self._session_writer.executemany(_UPSERT_SESSION, rows)
            self._session_writer.execute("COMMIT")
        except sqlite3.Error as exc:  # locked past the busy timeout: keep the rows and try again
            if self._session_writer.in_transaction:
                self._session_writer.execute("ROLLBACK")
            log.warning("%d session rows not saved yet: %s", len(rows), exc)
            with self._dirty_lock:
                for row in rows:
                    self._dirty.setdefault((row[0], row[1]), row)  # a newer state queued meanwhile wins
                self._schedule_flush()


_UPSERT_SESSION = (
    f"INSERT INTO sessions (principal, id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(principal, id) DO UPDATE SET calls = excluded.calls,"
    " calls_by_tool = excluded.calls_by_tool, rejected = excluded.rejected,"
    " terminated = excluded.terminated, terminate_message = excluded.terminate_message")
