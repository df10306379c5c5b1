"""The first look at an implicit run reads the database on the store's read worker, not on the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import psycopg

from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SqliteStore

HELD_SECONDS = 1.5  # how long another session keeps the table locked


async def test_a_first_look_blocked_in_the_database_leaves_the_event_loop_running(postgres_dsn: str) -> None:
    writer = PostgresStore(postgres_dsn)
    reader = PostgresStore(postgres_dsn)  # another process: opened (and migrated) before the lock is taken
    try:
        run = await writer.implicit_run("alice", "cli")
        await writer.flushed()
        locker = psycopg.connect(postgres_dsn)
        locker.execute("LOCK TABLE implicit_runs IN ACCESS EXCLUSIVE MODE")  # the reader's SELECT now waits
        release = threading.Timer(HELD_SECONDS, locker.commit)  # from a thread: a blocked loop cannot stop it
        release.start()
        try:
            looking = asyncio.create_task(reader.implicit_run("alice", "cli"))
            started, ticks_while_locked = time.monotonic(), 0
            while not looking.done():
                await asyncio.sleep(0.02)
                ticks_while_locked += not release.finished.is_set()  # a loop blocked in the SELECT ticks never
            waited = time.monotonic() - started
            assert await looking == run  # the stored run, read once the lock went
        finally:
            release.join()
            locker.close()
        assert waited >= HELD_SECONDS * 0.8  # the look really waited for the lock (a lower bound)...
        assert ticks_while_locked >= 3, ticks_while_locked  # ...while the loop went on running (counted, not timed)
    finally:
        writer.close()
        reader.close()


async def test_concurrent_first_looks_agree_on_one_run(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "g.sqlite3")
    try:
        runs = await asyncio.gather(*(store.implicit_run("alice", "cli") for _ in range(8)))
        assert len(set(runs)) == 1
        assert await store.implicit_run("alice", "other") != runs[0]
    finally:
        store.close()
