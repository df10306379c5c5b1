"""Sessions schema version 2 (gateway/store/flow_schema.py): a version-1 database, SQLite or PostgreSQL, is
upgraded on open; its runs read with no labels, tallies or history, and take them from then on."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from store_support import Opener, raw

from gateway.policy.flow import TallyChange, history_entry
from gateway.store import postgres, sqlite
from gateway.store.db import Db, SqliteDb
from gateway.store.migrations import migrate, schema_version


def _version_1(opener: Opener) -> Db:
    """A connection to the test's database at sessions version 1 (as the gateway before issue 21 left it)."""
    dsn = opener.dsn  # type: ignore[attr-defined]
    if dsn is not None:
        db: Db = postgres.PostgresDb(lambda: psycopg.connect(dsn, autocommit=True))
        migrate(db, "sessions", postgres.SESSION_MIGRATIONS[:1], "test")
    else:
        db = SqliteDb(sqlite3.connect(opener.path, isolation_level=None))  # type: ignore[attr-defined]
        migrate(db, "sessions", sqlite.SESSION_MIGRATIONS[:1], "test")
    return db


async def test_a_version_1_database_is_upgraded_and_its_runs_carry_flow_from_then_on(open_store: Opener) -> None:
    old = _version_1(open_store)
    try:
        old.execute("INSERT INTO sessions (principal, id, started_at, calls, calls_by_tool, rejected, terminated)"
                    " VALUES ('alice', 'before', '2026-01-01T00:00:00.000Z', 3, '{\"x\": 3}', 1, 0)")
        assert schema_version(old, "sessions") == 1
    finally:
        old.close()
    store = open_store(usage_windows={"day": 86400.0})
    state = await store.session("alice", "before")
    assert (state.calls, state.labels, state.history, state.tallies.values) == (3, [], [], {})
    store.add_labels(state, ["untrusted"])
    store.add_history(state, history_entry("web_fetch", "allow", None, ["untrusted"], "2026-12-02T10:00:00.000Z"))
    await store.admit(state, lambda view: (None, TallyChange(sums={"sent": 10.0})))
    await store.settle()
    again = await open_store(usage_windows={"day": 86400.0}).session("alice", "before")
    assert (again.calls, again.labels, len(again.history), again.tallies.values) == (3, ["untrusted"], 1,
                                                                                     {"sent": 10.0})
    db: Any = raw(open_store)
    try:
        assert db.execute("SELECT version FROM schema_versions WHERE component = 'sessions'").fetchone()[0] == 2
    finally:
        db.close()
