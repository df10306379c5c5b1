"""The embedded store: one SQLite file, WAL mode, one connection guarded by a lock.

Session rows are small and written once per call; SQLite on local disk does that in tens of
microseconds, so calls write through inline rather than through a thread pool. An in-memory
copy of each session serves reads.
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
    id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    calls_by_tool TEXT NOT NULL DEFAULT '{}',
    rejected INTEGER NOT NULL DEFAULT 0,
    terminated INTEGER NOT NULL DEFAULT 0,
    terminate_message TEXT
);
"""


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


class SqliteStore:
    """Sessions in SQLite; safe to share between the event loop and worker threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionState] = {}

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

    def session(self, session_id: str) -> SessionState:
        """The session's state, created on first sight."""
        found = self._sessions.get(session_id)
        if found is not None:
            return found
        with self._lock:
            row = self._db.execute(
                "SELECT started_at, calls, calls_by_tool, rejected, terminated, terminate_message"
                " FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                state = SessionState(session_id, now_rfc3339())
                self._db.execute("INSERT INTO sessions (id, started_at) VALUES (?, ?)",
                                 (session_id, state.started_at))
            else:
                state = SessionState(session_id, row[0], row[1], json.loads(row[2]), row[3], bool(row[4]), row[5])
        if len(self._sessions) >= MAX_CACHED_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[session_id] = state
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
                                   int(state.terminated), state.terminate_message, state.id)
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET calls = ?, calls_by_tool = ?, rejected = ?, terminated = ?,"
                " terminate_message = ? WHERE id = ?", values)
