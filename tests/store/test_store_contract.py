"""One contract for every store backend: SQLite (a file) and PostgreSQL (a throwaway cluster).

Each test opens stores the way separate gateway processes would (their own connections on one
database) and checks what the pipeline, approvals and the sessions API rely on.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from store_support import Opener, raw

from gateway.approvals.model import Approval, ApprovalState, Requirement, args_digest
from gateway.approvals.store import ApprovalStore
from gateway.core.errors import StoreSchemaError, StoreUnavailable
from gateway.policy.call import Principal
from gateway.store.postgres import PostgresStore
from gateway.store.sql import SqlStore


def _approval(principal: str = "alice", call_id: str = "c1", args: dict[str, Any] | None = None) -> Approval:
    args = {"amount": 5} if args is None else args
    now = time.time()
    return Approval(id=uuid.uuid4().hex[:16], call_id=call_id, digest=args_digest(args),
                    principal=Principal(principal, ("support",)), session_id="s1", tool="refund",
                    original_args=args, final_args=args,
                    requirements=[Requirement("big", "needs a manager", ["group:managers"])],
                    created_at="2026-01-01T00:00:00Z", expires_at="2026-01-01T01:00:00Z", expires_ts=now + 600,
                    on_timeout="reject")


# --- sessions --------------------------------------------------------------------------------------------------


async def test_a_session_is_created_counted_and_kept_across_a_reopen(open_store: Opener) -> None:
    store = open_store()
    state = await store.session("alice", "run-1")
    assert (state.calls, state.terminated, state.principal) == (0, False, "alice")
    store.count_call(state, "search")
    store.count_call(state, "fetch")
    store.record_outcome(state, rejected=True, tool="fetch")
    await store.flushed()
    again = await open_store().session("alice", "run-1")
    assert (again.calls, again.calls_by_tool, again.rejected) == (2, {"search": 1, "fetch": 1}, 1)
    assert await open_store().find_session("bob", "run-1") is None  # sessions belong to their principal


async def test_concurrent_increments_from_two_stores_lose_no_count(open_store: Opener) -> None:
    first, second = open_store(), open_store()
    a, b = await first.session("alice", "run"), await second.session("alice", "run")

    issued = 0

    async def hammer(store: SqlStore, state: Any, tool: str) -> None:
        nonlocal issued
        mine = 0
        for n in range(200):
            issued += 1
            mine += 1
            store.count_call(state, tool)
            if n % 7 == 0:
                await store.flushed()  # many small writes, racing the other store's
            if n % 3 == 0:  # reads racing those writes never count a call twice, nor lose this store's
                seen = (await store.session("alice", "run")).calls
                assert mine <= seen <= issued

    await asyncio.gather(hammer(first, a, "x"), hammer(second, b, "y"))
    await asyncio.gather(first.flushed(), second.flushed())
    seen = await open_store().session("alice", "run")
    assert (seen.calls, seen.calls_by_tool) == (400, {"x": 200, "y": 200})
    # and each store's own view, read again, is the database's
    assert (await first.session("alice", "run")).calls == 400
    assert (await second.session("alice", "run")).calls == 400


def test_increments_from_two_threads_each_with_its_own_store_all_land(open_store: Opener) -> None:
    stores = [open_store(), open_store()]

    def count(store: SqlStore) -> None:
        async def go() -> None:
            state = await store.session("alice", "threads")
            for _ in range(300):
                store.count_call(state, "t")
            await store.flushed()
        asyncio.run(go())

    threads = [threading.Thread(target=count, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert asyncio.run(open_store().session("alice", "threads")).calls == 600


async def test_a_termination_by_one_store_is_seen_by_another_and_a_reset_clears_it(open_store: Opener) -> None:
    a, b = open_store(), open_store()
    mine = await a.session("alice", "run")
    a.count_call(mine, "x")
    a.record_outcome(mine, rejected=True, terminate_message="budget spent", tool="x")
    await a.settle()
    theirs = await b.session("alice", "run")
    assert (theirs.terminated, theirs.terminate_message, theirs.calls) == (True, "budget spent", 1)
    b.reset(theirs)
    await b.settle()
    mine = await a.session("alice", "run")
    assert (mine.terminated, mine.calls, mine.rejected) == (False, 0, 0)
    a.end(mine, "ended by an admin")
    await a.settle()
    assert (await b.session("alice", "run")).terminate_message == "ended by an admin"


async def test_a_first_termination_message_is_kept_and_a_later_one_does_not_replace_it(open_store: Opener) -> None:
    a, b = open_store(), open_store()
    one, two = await a.session("alice", "r"), await b.session("alice", "r")
    a.record_outcome(one, rejected=False, terminate_message="first")
    await a.settle()
    b.record_outcome(two, rejected=False, terminate_message="second")  # b had not seen it yet
    await b.settle()
    assert (await open_store().session("alice", "r")).terminate_message == "first"


async def test_listing_sessions_pages_them_newest_first(open_store: Opener) -> None:
    store = open_store()
    for n in range(3):
        store.count_call(await store.session("alice", f"run-{n}"), "x")
        await asyncio.sleep(0.002)
    await store.session("bob", "other", client="cli")
    await store.flushed()
    page, total = await store.run(store.list_sessions, "alice", None, None, 2, 0)
    assert total == 3
    assert [s.id for s in page] == ["run-2", "run-1"]
    implicit, count = await store.run(store.list_sessions, None, True, None, 10, 0)
    assert (count, implicit[0].client) == (1, "cli")


async def test_usage_buckets_from_two_stores_add_up(open_store: Opener) -> None:
    a, b = open_store(usage_windows={"hour": 3600}), open_store(usage_windows={"hour": 3600})
    for _ in range(3):
        a.usage.count_call("alice", "x")
        b.usage.count_call("alice", "x")
    await asyncio.gather(a.flushed(), b.flushed())
    fresh = open_store(usage_windows={"hour": 3600})
    assert fresh.usage.snapshot("alice")["hour"].calls == 6


async def test_implicit_runs_are_kept_for_their_client(open_store: Opener) -> None:
    store = open_store()
    run = store.implicit_runs.run_for("alice", "cli")
    await store.flushed()
    assert open_store().implicit_runs.run_for("alice", "cli") == run


# --- migrations ------------------------------------------------------------------------------------------------


def test_opening_records_the_schema_versions_and_reopening_changes_nothing(open_store: Opener) -> None:
    ApprovalStore(open_store())
    ApprovalStore(open_store())
    with contextlib_closing(raw(open_store)) as db:
        rows = db.execute("SELECT component, version FROM schema_versions ORDER BY component").fetchall()
    assert [tuple(r) for r in rows] == [("approvals", 3), ("sessions", 2)]


def test_a_schema_newer_than_the_code_refuses_to_open(open_store: Opener) -> None:
    open_store()
    with contextlib_closing(raw(open_store)) as db:
        db.execute("UPDATE schema_versions SET version = 99 WHERE component = 'sessions'")
    with pytest.raises(StoreSchemaError, match="version 99, newer than this gateway knows"):
        open_store()


def test_stores_opening_at_once_migrate_once(open_store: Opener) -> None:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            ApprovalStore(open_store())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def contextlib_closing(db: Any) -> Any:
    import contextlib
    return contextlib.closing(db)


# --- approvals -------------------------------------------------------------------------------------------------


async def test_two_stores_inserting_one_key_get_one_request(open_store: Opener) -> None:
    a, b = ApprovalStore(open_store()), ApprovalStore(open_store())
    first, second = _approval(), _approval()
    got = await asyncio.gather(a.run(a.insert, first), b.run(b.insert, second))
    assert got[0].id == got[1].id
    _, total = await a.run(a.list_requests, None, 10, 0)
    assert total == 1


async def test_only_one_of_two_racing_claims_wins(open_store: Opener) -> None:
    a, b = ApprovalStore(open_store()), ApprovalStore(open_store())
    stored = await a.run(a.insert, _approval())
    stored.state = ApprovalState.APPROVED
    assert await a.run(a.transition, stored, ApprovalState.PENDING)
    for _ in range(20):  # many rounds, to give a lost update every chance
        one, two = (await a.run(a.get, stored.id)), (await b.run(b.get, stored.id))
        assert one is not None and two is not None
        one.state, one.owner, one.lease_ts = ApprovalState.EXECUTING, "A", time.time() + 60
        two.state, two.owner, two.lease_ts = ApprovalState.EXECUTING, "B", time.time() + 60
        won = await asyncio.gather(a.run(a.transition, one, ApprovalState.APPROVED),
                                   b.run(b.transition, two, ApprovalState.APPROVED))
        assert sorted(won) == [False, True]
        back = await a.run(a.get, stored.id)
        assert back is not None
        back.state, back.owner, back.lease_ts = ApprovalState.APPROVED, None, None
        assert await a.run(a.transition, back, ApprovalState.EXECUTING)


async def test_a_run_bound_request_still_answers_calls_that_came_in_before_it_let_go_of_its_key(
        open_store: Opener) -> None:
    a, b = ApprovalStore(open_store()), ApprovalStore(open_store())
    ran = _approval()
    ran.by_run = True
    stored = await a.run(a.insert, ran)
    key = ("alice", "", "s1", "refund", stored.digest)
    before = time.time()  # a retry the gateway took in while the request was live
    stored.state = ApprovalState.APPROVED
    assert await a.run(a.transition, stored, ApprovalState.PENDING)
    stored.state, stored.retired = ApprovalState.EXECUTED, True  # the run's caller was given the outcome
    assert await a.run(a.transition, stored, ApprovalState.APPROVED)
    after = time.time() + 0.001  # a call that came in once the outcome was given
    for store in (a, b):  # wherever the retry landed
        found = await store.run(store.find_by_run, *key, before)
        assert found is not None and (found.id, found.state) == (stored.id, ApprovalState.EXECUTED)
        assert await store.run(store.find_by_run, *key, after) is None  # a new decision
        assert await store.run(store.find_by_run, *key) is None  # no live request holds the key
    denied = _approval(args={"amount": 7})
    denied.by_run = True
    denied = await a.run(a.insert, denied)
    asked = time.time()
    await a.run(a.retire, denied.id)  # its denial was told: it lets go of its key the other way
    found = await b.run(b.find_by_run, "alice", "", "s1", "refund", denied.digest, asked)
    assert found is not None and found.id == denied.id
    assert await b.run(b.find_by_run, "alice", "", "s1", "refund", denied.digest, time.time() + 0.001) is None


async def test_only_a_claim_whose_lease_ran_out_is_abandoned(open_store: Opener) -> None:
    store = ApprovalStore(open_store())
    live, dead = await store.run(store.insert, _approval(call_id="live")), \
        await store.run(store.insert, _approval(call_id="dead"))
    now = time.time()
    for approval, lease in ((live, now + 60), (dead, now - 1)):
        approval.state, approval.owner, approval.lease_ts = ApprovalState.EXECUTING, "other", lease
        assert await store.run(store.transition, approval, ApprovalState.PENDING)
    assert [a.id for a in await store.run(store.abandoned, now)] == [dead.id]
    assert not await store.run(store.interrupt, live, now)
    assert await store.run(store.interrupt, dead, now)


async def test_a_listing_filters_by_text_and_audience(open_store: Opener) -> None:
    store = ApprovalStore(open_store())
    await store.run(store.insert, _approval(args={"note": "Refund ORDER-77"}))
    await store.run(store.insert, _approval(call_id="c2", args={"note": "other"}))
    from gateway.approvals.store import ListFilter
    found, total = await store.run(store.list_requests, None, 10, 0, ListFilter(text="order-77"))
    assert total == 1 and found[0].final_args == {"note": "Refund ORDER-77"}
    _, seen = await store.run(store.list_requests, None, 10, 0, ListFilter(audience=("group:managers",)))
    _, unseen = await store.run(store.list_requests, None, 10, 0, ListFilter(audience=("group:nobody",)))
    assert (seen, unseen) == (2, 0)


async def test_a_change_made_through_one_store_wakes_listeners_on_another(open_store: Opener, backend: str) -> None:
    a, b = ApprovalStore(open_store()), ApprovalStore(open_store())
    loop = asyncio.get_running_loop()
    heard: asyncio.Queue[str] = asyncio.Queue()
    pushed = b.listen(lambda payload: loop.call_soon_threadsafe(heard.put_nowait, payload))
    if backend == "sqlite":
        assert pushed is False  # SQLite cannot push: held calls poll (see the multi-process tests)
        return
    assert pushed is True
    assert await asyncio.wait_for(heard.get(), 10) == ""  # connected
    stored = await a.run(a.insert, _approval())
    stored.state = ApprovalState.APPROVED
    assert await a.run(a.transition, stored, ApprovalState.PENDING)
    assert await asyncio.wait_for(heard.get(), 10) == stored.id


def test_an_unreachable_postgres_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match=r"cannot connect to postgresql://127\.0\.0\.1:1/nothing"):
        PostgresStore("postgresql://user:secret@127.0.0.1:1/nothing")


async def test_postgres_connections_the_server_dropped_are_reopened(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    approvals = ApprovalStore(store)
    try:
        state = await store.session("alice", "r")
        store.count_call(state, "x")
        await store.flushed()
        stored = await approvals.run(approvals.insert, _approval())
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # a restart, a failover, an idle timeout
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        store.count_call(state, "x")
        await store.flushed()  # fails on the dropped connection; the rows are kept and written again
        await store.flushed()
        with pytest.raises(StoreUnavailable):  # the statement that finds the connection broken fails...
            await approvals.run(approvals.get, stored.id)
        assert (await approvals.run(approvals.get, stored.id)) is not None  # ...the next one reconnects
        with pytest.raises(StoreUnavailable, match="sessions database is unavailable"):  # fail closed...
            await store.session("alice", "r")
        assert (await store.session("alice", "r")).calls == 2  # ...then read again
    finally:
        store.close()
    fresh = PostgresStore(postgres_dsn)
    try:
        assert (await fresh.session("alice", "r")).calls == 2
    finally:
        fresh.close()


async def test_usage_windows_count_every_stores_calls_once_written(open_store: Opener) -> None:
    a, b = open_store(usage_windows={"hour": 3600}), open_store(usage_windows={"hour": 3600})
    a.count_call(await a.session("alice", "r"), "x")
    await a.settle()
    theirs = await b.session("alice", "r")
    b.count_call(theirs, "x")
    b.count_call(theirs, "y")
    mine = await b.usage_now("alice")  # the database's count, and b's own not written yet
    assert (mine["hour"].calls, mine["hour"].calls_by_tool) == (3, {"x": 2, "y": 1})
    await b.settle()
    assert (await a.usage_now("alice"))["hour"].calls == 3
    assert (await b.usage_now("alice"))["hour"].calls == 3  # written: counted once, not twice
