"""The embedded store: one SQLite file, WAL mode (see sql.py for how the connections are used).

In WAL mode a reader never waits for a writer; every write runs on a worker thread with a busy
timeout, so another process holding the file locked delays the writes and never the loop.

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

import sqlite3
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.core.limits import DEFAULT_RUN_IDLE_SECONDS, SQLITE_BUSY_TIMEOUT_SECONDS
from gateway.store.db import Db, SqliteDb
from gateway.store.flow_schema import FLOW_MIGRATION
from gateway.store.migrations import Migration, migrate
from gateway.store.model import SessionState
from gateway.store.sql import UNOWNED, SqlStore
from gateway.store.write_behind import COLUMNS

__all__ = ["SESSION_MIGRATIONS", "SessionState", "SqliteStore"]

_TABLES = (
    """CREATE TABLE IF NOT EXISTS sessions (
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
)""",
    """CREATE TABLE IF NOT EXISTS usage (
    principal TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    tool TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    rejected INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, bucket, tool)
)""",
    """CREATE TABLE IF NOT EXISTS implicit_runs (
    principal TEXT NOT NULL,
    client TEXT NOT NULL,
    run_id TEXT NOT NULL,
    last_call REAL NOT NULL,
    PRIMARY KEY (principal, client)
)""",
)

# Columns added to `sessions` after it was first keyed by principal (files from before versioning).
_ADDED_COLUMNS = {"implicit": "INTEGER NOT NULL DEFAULT 0", "client": "TEXT"}


def _adopt(db: Db) -> None:
    """Version 1: today's tables, bringing a file from before versioned migrations up to them."""
    columns = [row[1] for row in db.execute("PRAGMA table_info(sessions)").fetchall()]
    if columns and "principal" not in columns:  # keyed by id alone: the rows become unowned
        db.execute("ALTER TABLE sessions RENAME TO sessions_unowned")
        db.execute(_TABLES[0])
        db.execute("INSERT INTO sessions (principal, id, started_at, calls, calls_by_tool, rejected, terminated,"
                   " terminate_message) SELECT ?, id, started_at, calls, calls_by_tool, rejected, terminated,"
                   " terminate_message FROM sessions_unowned", (UNOWNED,))
        db.execute("DROP TABLE sessions_unowned")
        columns = [row[1] for row in db.execute("PRAGMA table_info(sessions)").fetchall()]
    for name, kind in _ADDED_COLUMNS.items():
        if columns and name not in columns:
            db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
    for table in _TABLES:
        db.execute(table)


SESSION_MIGRATIONS = (Migration(1, "sessions, usage buckets and implicit runs", _adopt), FLOW_MIGRATION)


class SqliteStore(SqlStore):
    """Sessions in SQLite; safe to share between the event loop and worker threads."""

    def __init__(self, path: str | Path, busy_timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS, *,
                 usage_windows: Mapping[str, float] | None = None,
                 idle_timeout: float = DEFAULT_RUN_IDLE_SECONDS, write_through: bool = False) -> None:
        self.path = str(path)
        target, uri = self.path, False
        if self.path == ":memory:":  # the connections must see one database
            target, uri = f"file:gateway-{uuid.uuid4().hex}?mode=memory&cache=shared", True
        else:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)

        def connect() -> Db:
            db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, uri=uri,
                                 timeout=busy_timeout)
            _wal(db, busy_timeout)
            db.execute("PRAGMA synchronous=NORMAL")
            return SqliteDb(db)

        super().__init__(connect, self.path, usage_windows=usage_windows, idle_timeout=idle_timeout,
                         write_through=write_through)

    def _migrate(self, db: Db) -> None:
        migrate(db, "sessions", SESSION_MIGRATIONS, self.path)

    def _unowned_row(self, session_id: str) -> tuple[Any, ...] | None:
        try:
            row = self._reader.execute(f"SELECT {COLUMNS} FROM sessions WHERE principal = ? AND id = ?",
                                       (UNOWNED, session_id)).fetchone()
        except sqlite3.Error:  # not readable now: the principal starts afresh, as with no such row
            return None
        return None if row is None else tuple(row)


def _wal(db: sqlite3.Connection, busy_timeout: float) -> None:
    """Put a connection's database in WAL mode. Switching a new file to WAL needs its exclusive lock and
    SQLite's busy handler does not wait for it, so processes (or threads) opening a fresh file at once get
    "database is locked": ask again until the busy timeout has passed, as the busy handler would."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
