"""Admissions (gateway/store/admission.py) on SQLite and PostgreSQL: a tallied call is decided on tallies read
fresh under a lock and counted in the same transaction, so racing calls never pass a cap together."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import psycopg
import pytest
from store_support import Opener, raw

from gateway.core.errors import StoreUnavailable
from gateway.policy.flow import Tallies, TallyChange
from gateway.store.admission import Admission
from gateway.store.model import TallyView
from gateway.store.sqlite import SqliteStore

DAY = {"day": 86400.0}
CAP = 1000.0


def transfer(amount: float, cap: float = CAP) -> Any:
    """A judge: admit a transfer of ``amount`` unless the run's or the day's total would pass ``cap``."""

    def judge(view: TallyView) -> tuple[bool, TallyChange | None]:
        totals = [view.run.values.get("sent", 0.0)] + [w.values.get("sent", 0.0) for w in view.windows.values()]
        if max(totals) + amount > cap:
            return False, None
        return True, TallyChange(sums={"sent": amount})

    return judge


def mail(*to: str) -> Any:
    """A judge that always admits, naming recipients for the distinct tally ``to``."""
    return lambda view: (view, TallyChange(distinct={"to": to}))


async def test_an_admission_counts_in_the_run_and_the_window_and_another_store_reads_both(open_store: Opener) -> None:
    here, there = open_store(usage_windows=DAY), open_store(usage_windows=DAY)
    state = await here.session("alice", "run-1")
    assert await here.admit(state, transfer(300)) is True
    assert state.tallies.values == {"sent": 300.0}  # in memory at once
    await here.admit(state, mail("a@x", "b@x"))
    await here.admit(await here.session("alice", "run-2"), mail("b@x", "c@x"))  # another run, the same day
    theirs = await there.session("alice", "run-1")
    assert (theirs.tallies.values, theirs.tallies.seen) == ({"sent": 300.0, "to": 2}, {"to": ["a@x", "b@x"]})
    day = (await there.window_tallies("alice"))["day"]
    assert day.values == {"sent": 300.0, "to": 3} and sorted(day.seen["to"]) == ["a@x", "b@x", "c@x"]
    assert await there.window_tallies("bob") == {"day": Tallies()}
    seen: list[TallyView] = []
    await there.admit(theirs, lambda view: (seen.append(view), None))  # the view a judge is given
    assert seen[0].run.values == {"sent": 300.0, "to": 2} and seen[0].windows["day"].values["to"] == 3


async def test_a_refused_call_adds_nothing_and_a_judge_that_raises_rolls_back(open_store: Opener) -> None:
    store = open_store(usage_windows=DAY)
    state = await store.session("alice", "run")
    assert await store.admit(state, transfer(900)) is True
    assert await store.admit(state, transfer(200)) is False  # past the cap: not counted

    def broken(view: TallyView) -> tuple[bool, TallyChange | None]:
        raise ValueError("the tally could not be computed")

    with pytest.raises(ValueError, match="could not be computed"):
        await store.admit(state, broken)

    def buggy(view: TallyView) -> tuple[bool, TallyChange | None]:
        raise RuntimeError("a bug in the judge")

    with pytest.raises(RuntimeError, match="a bug in the judge"):  # its own error, not "the store is closing"
        await store.admit(state, buggy)
    fresh = open_store(usage_windows=DAY)
    assert (await fresh.session("alice", "run")).tallies.values == {"sent": 900.0}
    assert (await fresh.window_tallies("alice"))["day"].values == {"sent": 900.0}


async def test_two_hundred_racing_admissions_under_a_cap_admit_exactly_ten(open_store: Opener) -> None:
    one, two = open_store(usage_windows=DAY), open_store(usage_windows=DAY)  # as two processes on one database
    states = [await one.session("alice", "run"), await two.session("alice", "run")]
    results = await asyncio.gather(*(store.admit(states[n % 2], transfer(100))
                                     for n, store in enumerate([one, two] * 100)))
    assert results.count(True) == 10
    assert (await open_store().session("alice", "run")).tallies.values == {"sent": CAP}
    assert (await one.window_tallies("alice"))["day"].values == {"sent": CAP}


async def test_racing_admissions_of_different_runs_share_the_principals_window_cap(open_store: Opener) -> None:
    one, two = open_store(usage_windows=DAY), open_store(usage_windows=DAY)
    states = [await store.session("alice", f"run-{n}") for n, store in enumerate([one, two] * 20)]
    results = await asyncio.gather(*(store.admit(states[n], transfer(100, cap=500))
                                     for n, store in enumerate([one, two] * 20)))
    assert results.count(True) == 5
    assert (await two.window_tallies("alice"))["day"].values == {"sent": 500.0}


async def test_with_no_usage_windows_only_the_run_is_tallied(open_store: Opener) -> None:
    store = open_store()
    state = await store.session("alice", "run")
    views: list[TallyView] = []
    await store.admit(state, lambda view: (views.append(view), TallyChange(sums={"sent": 5.0})))
    assert views[0].windows == {} and state.tallies.values == {"sent": 5.0}
    assert await store.window_tallies("alice") == {}
    db = raw(open_store)
    try:
        assert db.execute("SELECT count(*) FROM tally_sums").fetchone()[0] == 0
    finally:
        db.close()


async def test_a_window_counts_only_its_own_minutes(open_store: Opener) -> None:
    store = open_store(usage_windows={"hour": 3600.0, "day": 86400.0})
    now = Admission.minute()
    db = raw(open_store)
    then = now - 120
    try:  # a transfer two hours ago, and a recipient last written to then
        db.execute(f"INSERT INTO tally_sums (principal, bucket, tally, amount) VALUES ('alice', {then}, 'sent', 700)")
        db.execute(f"INSERT INTO tally_seen (principal, tally, value, bucket) VALUES ('alice', 'to', 'old@x', {then})")
    finally:
        db.close()
    state = await store.session("alice", "run")
    await store.admit(state, transfer(100))
    await store.admit(state, mail("new@x"))
    windows = await store.window_tallies("alice")
    assert (windows["hour"].values, windows["hour"].seen) == ({"sent": 100.0, "to": 1}, {"to": ["new@x"]})
    assert (windows["day"].values, windows["day"].seen) == ({"sent": 800.0, "to": 2}, {"to": ["old@x", "new@x"]})
    assert await store.admit(state, transfer(201)) is False  # the day holds 800: 201 more passes the cap
    await store.admit(state, mail("old@x"))  # used again now: in the hour, and not a new value for the day
    windows = await store.window_tallies("alice")
    assert (windows["hour"].values["to"], windows["day"].values["to"]) == (2, 2)


async def test_a_reset_clears_the_runs_tallies_and_keeps_the_principals_windows(open_store: Opener) -> None:
    store = open_store(usage_windows=DAY)
    state = await store.session("alice", "run")
    await store.admit(state, transfer(600))
    store.reset(state)
    assert state.tallies == Tallies()
    views: list[TallyView] = []
    await store.admit(state, lambda view: (views.append(view), None))  # the reset is written before it reads
    assert views[0].run == Tallies() and views[0].windows["day"].values == {"sent": 600.0}
    assert (await open_store().session("alice", "run")).tallies == Tallies()


async def test_admissions_run_on_their_own_thread(open_store: Opener) -> None:
    store = open_store()
    state = await store.session("alice", "run")
    names = await asyncio.gather(*(store.admit(state, lambda view: (threading.current_thread().name, None))
                                   for _ in range(3)))
    assert {name.split("_")[0] for name in names} == {"gateway-admit"}


async def test_a_cached_store_keeps_window_tallies_in_memory_and_writes_every_admission(tmp_path: Any) -> None:
    store = SqliteStore(tmp_path / "s.db", usage_windows=DAY)  # this process alone writes it
    try:
        state = await store.session("alice", "run")
        await store.admit(state, transfer(250))
        await store.admit(state, mail("a@x"))
        with sqlite3.connect(tmp_path / "s.db") as db:  # a change behind its back: not read, memory answers
            db.execute("UPDATE tally_sums SET amount = 999")
        assert (await store.window_tallies("alice"))["day"].values == {"sent": 250.0, "to": 1}
        with sqlite3.connect(tmp_path / "s.db") as db:
            db.execute("UPDATE tally_sums SET amount = 250")
    finally:
        store.close()
    again = SqliteStore(tmp_path / "s.db", usage_windows=DAY)
    try:
        state = await again.session("alice", "run")
        assert state.tallies.values == {"sent": 250.0, "to": 1}
        assert await again.admit(state, transfer(750)) is True  # its first admission reads the stored buckets
        assert await again.admit(await again.session("alice", "other"), transfer(1)) is False  # the day is full
        assert (await again.window_tallies("alice"))["day"].values == {"sent": 1000.0, "to": 1}
    finally:
        again.close()


async def test_a_locked_sqlite_file_refuses_the_admission_as_store_unavailable(tmp_path: Any) -> None:
    store = SqliteStore(tmp_path / "s.db", busy_timeout=0.05)
    locker = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        state = await store.session("alice", "run")
        await store.flushed()
        locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
        with pytest.raises(StoreUnavailable, match="tallies database is unavailable"):
            await store.admit(state, transfer(1))
        locker.execute("ROLLBACK")
        assert await store.admit(state, transfer(1)) is True
    finally:
        locker.close()
        store.close()


async def test_a_dropped_postgres_connection_refuses_one_admission_then_reconnects(postgres_dsn: str) -> None:
    from gateway.store.postgres import PostgresStore
    store = PostgresStore(postgres_dsn)
    try:
        state = await store.session("alice", "run")
        assert await store.admit(state, transfer(1)) is True
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        with pytest.raises(StoreUnavailable, match="tallies database is unavailable"):
            await store.admit(state, transfer(1))
        assert await store.admit(state, transfer(1)) is True
        assert state.tallies.values == {"sent": 2.0}
    finally:
        store.close()


async def test_a_reset_that_cannot_be_written_yet_refuses_the_admission(tmp_path: Any) -> None:
    store = SqliteStore(tmp_path / "s.db", busy_timeout=0.05)
    locker = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        state = await store.session("alice", "run")
        await store.admit(state, transfer(600))
        locker.execute("BEGIN IMMEDIATE")
        store.reset(state)  # queued; its write waits for the lock
        with pytest.raises(StoreUnavailable, match="reset is not saved"):  # not decided on the 600 it clears
            await store.admit(state, transfer(600))
        locker.execute("ROLLBACK")
        assert await store.admit(state, transfer(600)) is True  # the reset is written first: 600 of 1000
        assert state.tallies.values == {"sent": 600.0}
    finally:
        locker.close()
        store.close()
    with pytest.raises(StoreUnavailable, match="closing"):  # a closed store admits nothing
        await store.admit(state, transfer(1))
