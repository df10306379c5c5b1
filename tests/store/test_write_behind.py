"""Counts written behind survive a write that fails: they are queued again, before what came meanwhile."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gateway.store.sqlite import SqliteStore


def _stored(path: Path) -> tuple[int, str, int] | None:
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT calls, calls_by_tool, rejected FROM sessions WHERE principal = 'p' AND id = 's'"
                         ).fetchone()
        usage = db.execute("SELECT sum(calls) FROM usage WHERE principal = 'p'").fetchone()
    assert (usage[0] or 0) == (0 if row is None else row[0])  # the usage bucket counted the same calls
    return None if row is None else (int(row[0]), str(row[1]), int(row[2]))


async def test_a_failed_write_keeps_its_counts_and_writes_them_later(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path, busy_timeout=0.05, usage_windows={"hour": 3600})
    try:
        state = await store.session("p", "s")
        await store.flushed()
        assert _stored(path) == (0, "{}", 0)
        locker = sqlite3.connect(path, isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
        try:
            store.count_call(state, "search")
            store.record_outcome(state, rejected=True, tool="search")
            before = store.write_behind.transactions
            await store.flushed()
            assert store.write_behind.transactions == before  # nothing was written...
            store.count_call(state, "fetch")  # ...and a count made meanwhile lands after the kept ones
            assert (state.calls, state.rejected) == (2, 1)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        await store.flushed()
        assert _stored(path) == (2, '{"search": 1, "fetch": 1}', 1)
        assert not store.write_behind.pending and not store.write_behind.usage and not store.write_behind.rows
    finally:
        store.close()
