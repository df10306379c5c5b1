"""Counts written behind are gathered into one transaction per moment, not one per change (issue 12).

A call changes its session row, its usage bucket and its implicit run at different points; without a
write-through (one process on the store) those changes wait ``coalesce`` seconds and go out together.
With write-through (several processes) nothing waits: each call's counts are written before it answers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from gateway.core.limits import STORE_WRITE_COALESCE_SECONDS
from gateway.store.sqlite import SqliteStore


def stored_calls(path: Path, principal: str, session_id: str) -> int | None:
    """The session's calls as another connection reads them from the file."""
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT calls FROM sessions WHERE principal = ? AND id = ?",
                         (principal, session_id)).fetchone()
    return None if row is None else int(row[0])


async def test_the_changes_of_one_call_go_out_in_one_transaction(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", usage_windows={"hour": 3600})
    try:
        assert store.write_behind.coalesce == STORE_WRITE_COALESCE_SECONDS > 0
        store.write_behind.coalesce = 0.5  # longer than the default, so a busy machine cannot split the gathering
        state = await store.session("alice", "run-1", "agent-x")  # an implicit run: its row is a change too
        await store.flushed()
        before = store.write_behind.transactions
        store.count_call(state, "echo")
        await asyncio.sleep(0.05)  # the call awaits its tool meanwhile
        store.record_outcome(state, rejected=True, tool="echo")
        store.count_call(state, "echo")
        deadline = time.monotonic() + 5
        while stored_calls(tmp_path / "s.db", "alice", "run-1") != 2:  # written without anyone asking
            assert time.monotonic() < deadline, "the counts were never written"
            await asyncio.sleep(0.005)
        await store.flushed()
        assert store.write_behind.transactions == before + 1
        reread = await store.session("alice", "run-1")
        assert (reread.calls, reread.rejected, reread.calls_by_tool) == (2, 1, {"echo": 2})
        assert store.usage.snapshot("alice")["hour"].calls == 2
    finally:
        store.close()


async def test_with_write_through_nothing_waits_and_each_call_is_written_before_it_answers(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", write_through=True)
    try:
        assert store.write_behind.coalesce == 0
        state = await store.session("alice", "run-1")
        for n in (1, 2, 3):
            store.count_call(state, "echo")
            await store.settle()  # what the pipeline awaits at the end of each call
            assert stored_calls(tmp_path / "s.db", "alice", "run-1") == n
    finally:
        store.close()


async def test_closing_writes_what_was_still_gathering(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    state = await store.session("bob", "run-9")
    store.count_call(state, "echo")
    store.close()  # before the gathering moment is over
    assert stored_calls(tmp_path / "s.db", "bob", "run-9") == 1
