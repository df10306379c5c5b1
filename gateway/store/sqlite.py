"""The embedded store: one SQLite file, WAL mode, one connection guarded by a lock.

Session rows are small and written once per call; SQLite on local disk does that in tens of
microseconds, so calls write through inline rather than through a thread pool. An in-memory
copy of each session serves reads.

A session belongs to the principal that named it: rows are keyed by (principal, session id),
so one key naming another's session id gets a session of its own, never the other's counters.
A database from before that (sessions keyed by id alone) is migrated on open: its rows are kept
as unowned, and each principal that names one of those ids starts from a copy of its counters,
so a session terminated before the upgrade stays terminated for whoever used it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.limits import MAX_CACHED_SESSIONS

__all__ = ["SessionState", "SqliteStore"]

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
# which no principal has: the rows are only ever copied from, by ``_legacy_row``.
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

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], SessionState] = {}

    def _migrate(self) -> None:
        """Sessions keyed by id alone become unowned rows (see the module docstring)."""
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(sessions)")]
        if columns and "principal" not in columns:
            self._db.executescript(f"BEGIN IMMEDIATE;{_MIGRATE_UNOWNED}COMMIT;")

    @property
    def connection(self) -> sqlite3.Connection:
        """The shared connection, for stores that add their own tables (hold ``lock``)."""
        return self._db

    @property
    def lock(self) -> threading.Lock:
        """The lock that guards the connection."""
        return self._lock

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def session(self, principal: str, session_id: str) -> SessionState:
        """The principal's session of that id, created on first sight."""
        key = (principal, session_id)
        found = self._sessions.get(key)
        if found is not None:
            return found
        with self._lock:
            select = f"SELECT {_COLUMNS} FROM sessions WHERE principal = ? AND id = ?"
            row = self._db.execute(select, key).fetchone()
            if row is None:
                row = self._db.execute(select, (_UNOWNED, session_id)).fetchone() or \
                    (now_rfc3339(), 0, "{}", 0, 0, None)
                self._db.execute(f"INSERT INTO sessions (principal, id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                 (*key, *row))
            state = SessionState(session_id, row[0], row[1], json.loads(row[2]), row[3], bool(row[4]), row[5],
                                 principal)
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
        values: tuple[Any, ...] = (state.calls, json.dumps(state.calls_by_tool), state.rejected,
                                   int(state.terminated), state.terminate_message, state.principal, state.id)
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET calls = ?, calls_by_tool = ?, rejected = ?, terminated = ?,"
                " terminate_message = ? WHERE principal = ? AND id = ?", values)
