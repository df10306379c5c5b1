"""When a call reads its session's row (issue 12: the trip to the reader thread was a tenth of a call's CPU).

A store only this process writes reads a row once, at first sight, and keeps the session's state from then
on: every change to it is made here. A shared store (``--workers``, ``store.shared``, PostgreSQL) reads the
row on every call, so what another process counted or ended is seen by the next call.
"""

from __future__ import annotations

from pathlib import Path

from gateway.store.sqlite import SqliteStore


async def test_a_store_only_this_process_writes_reads_a_row_once_and_keeps_every_change(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        first = await store.session("alice", "run-1")
        store.count_call(first, "search")
        again = await store.session("alice", "run-1")
        assert again is first and (again.calls, again.calls_by_tool) == (1, {"search": 1})
        store.record_outcome(again, rejected=True, terminate_message="budget spent", tool="search")
        ended = await store.session("alice", "run-1")
        assert (ended.rejected, ended.terminated, ended.terminate_message) == (1, True, "budget spent")
        store.reset(ended)  # what the admin API's reset does, in this process
        assert (await store.session("alice", "run-1")).terminated is False
        assert store.row_reads == 1
        assert (await store.session("bob", "run-1")).calls == 0  # another principal's run: its own first sight
        assert store.row_reads == 2
    finally:
        store.close()
    reopened = SqliteStore(tmp_path / "s.db")  # and all of it was written: a restart starts from it
    try:
        state = await reopened.session("alice", "run-1")
        assert (state.calls, state.rejected, state.terminated) == (0, 0, False)
        assert reopened.row_reads == 1
    finally:
        reopened.close()


async def test_a_shared_store_reads_the_row_on_every_call_and_sees_the_other_process(tmp_path: Path) -> None:
    here, there = SqliteStore(tmp_path / "s.db", write_through=True), SqliteStore(tmp_path / "s.db", write_through=True)
    try:
        mine = await here.session("alice", "run-1")
        here.count_call(mine, "search")
        await here.flushed()
        theirs = await there.session("alice", "run-1")
        assert theirs.calls == 1
        there.end(theirs, "ended by an administrator on the other process")
        await there.flushed()
        seen = await here.session("alice", "run-1")
        assert (seen.terminated, seen.terminate_message) == (True, "ended by an administrator on the other process")
        assert here.row_reads == 2
    finally:
        here.close()
        there.close()
