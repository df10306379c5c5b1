"""Operations that must not corrupt approval state (issue 7, item 10).

    a second gateway on the same database     leaves the first one's running call alone
    a gateway that died mid-run               its claim is marked interrupted once its lease ran out
    the database locked by another process    clear refusals and 503s, nothing run, nothing stuck,
                                              and the event loop keeps serving
    200 concurrent retries of an approved call  every one gets the one run's outcome
    who sees what                             approvers see what their groups may decide; admins all
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from approval_support import (
    PEOPLE,
    PUBLIC_URL,
    STEP_SECONDS,
    api_keys,
    approve_rule,
    auth_header,
    finished,
    in_background,
    policy,
)

from gateway.approvals.model import ApprovalState
from gateway.approvals.store import ApprovalStore
from gateway.auth.keys import hash_key
from gateway.store.sqlite import SqliteStore

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

SLOW = policy(approve_rule("slow-needs-ops", "ops_slow", approvers=["group:ops"]))
OPS_ONLY = policy(approve_rule("deploys-need-ops", approvers=["group:ops"]))

# Holds the database's write lock until its stdin closes (another process, as an operator's sqlite3 shell would).
LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def _db(gw: Any) -> Path:
    path: Path = gw.config.path(gw.config.spec.store.sqlite)
    return path


@contextlib.asynccontextmanager
async def locked(db: Path) -> AsyncIterator[None]:
    """The SQLite file locked for writing by another process until the block ends."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", LOCKER, str(db),
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert (await asyncio.wait_for(proc.stdout.readline(), STEP_SECONDS)).strip() == b"locked"
        yield
    finally:
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), STEP_SECONDS)


async def _approved(bench: Any, gw: Any, tool: str, args: dict[str, Any], cid: str) -> str:
    held = await bench.invoke(gw, tool, args, call_id=cid)
    assert held.status_code == 202, held.text
    approval_id: str = held.json()["approval_id"]
    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
    return approval_id


async def _until(check: Any) -> None:
    deadline = time.monotonic() + STEP_SECONDS
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# --- instances ------------------------------------------------------------------------------------------


def beside(config: Path) -> Path:
    """The same config for a second gateway on the same database, with an audit file of its own (one writer
    per audit file: the second would otherwise stop at start, audit-log-in-use, before it reached recovery)."""
    spec = yaml.safe_load(config.read_text())
    second = config.with_name("gateway-second.yaml")
    second.write_text(yaml.safe_dump({**spec, "audit": {**spec["audit"], "file": "data/audit-second.jsonl"}}))
    return second


async def test_a_second_gateway_on_the_same_database_leaves_a_running_approved_call_alone(bench, call_id):
    config = bench.write(SLOW, call_timeout="280s")  # the call ends when the test releases it, not at a timeout
    first = await bench.stack.enter_async_context(bench.gateway(config))
    cid, args = call_id(), {"seconds": "until-released"}
    approval_id = await _approved(bench, first, "ops_slow", args, cid)
    async with in_background(bench.invoke(first, "ops_slow", args, call_id=cid)) as running:
        await _until(lambda: bench.upstream.ran("slow") == 1)
        # An operator starts a second `gateway serve` on the same config: it starts up (recovery
        # included), then fails to bind the port the first one holds. The call runs until the test
        # releases it, however long that takes on a loaded machine.
        port = first.url.rsplit(":", 1)[1]
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", str(beside(config)), "--port", port, "--log-level", "warning",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode != 0 and "address already in use" in err.decode().lower(), err.decode()
        assert not running.done(), "the call ended before the test released it"
        assert (await bench.approval(first, approval_id))["state"] == "executing"
        bench.upstream.released.set()
        response = await finished(running)

    body = response.json()
    assert (response.status_code, body["is_error"]) == (200, False), response.text
    assert body["structured"]["run"] == 1
    assert (await bench.approval(first, approval_id))["state"] == "executed"
    replay = await bench.invoke(first, "ops_slow", args, call_id=cid)
    assert replay.json()["structured"] == body["structured"]  # the real result, not "interrupted"
    assert bench.upstream.ran("slow") == 1


async def test_a_second_gateway_running_beside_the_first_leaves_its_running_call_alone(bench, call_id):
    config = bench.write(SLOW)
    first = await bench.stack.enter_async_context(bench.gateway(config))
    cid, args = call_id(), {"seconds": "until-released"}  # the run lasts until the test says so
    approval_id = await _approved(bench, first, "ops_slow", args, cid)
    async with in_background(bench.invoke(first, "ops_slow", args, call_id=cid)) as running:
        await _until(lambda: bench.upstream.ran("slow") == 1)
        async with bench.gateway(beside(config)) as second:  # recovers at start, then sweeps every second
            await asyncio.sleep(1.2)  # a sweep or more (a lower bound: load only makes it more)
            assert not running.done()
            assert (await bench.approval(second, approval_id))["state"] == "executing"
            bench.upstream.released.set()
            # A retry through the second gateway waits for the first one's run and gets its outcome.
            through_second = await bench.invoke(second, "ops_slow", args, call_id=cid)
        response = await finished(running)

    assert (response.status_code, response.json()["is_error"]) == (200, False), response.text
    assert response.json()["structured"]["run"] == 1
    assert through_second.json()["structured"] == response.json()["structured"], through_second.text
    assert bench.upstream.ran("slow") == 1


async def test_a_claim_whose_gateway_died_is_marked_interrupted_once_its_lease_ran_out(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid = call_id()
    approval_id = await _approved(bench, gw, "ops_deploy", {"service": "billing"}, cid)
    dead = SqliteStore(_db(gw))  # another process's claim, whose lease ran out a second ago
    try:
        store = ApprovalStore(dead)
        approval = store.get(approval_id)
        assert approval is not None
        approval.state, approval.owner, approval.lease_ts = ApprovalState.EXECUTING, dead.instance_id, time.time() - 1
        assert store.transition(approval, ApprovalState.APPROVED)
    finally:
        dead.close()

    retry = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)

    assert (retry.status_code, retry.json()["decision"]) == (200, "interrupted"), retry.text
    assert bench.upstream.ran("deploy") == 0  # it may have run elsewhere, so it is never run again
    assert (await bench.approval(gw, approval_id))["state"] == "executed"


# --- a locked database -------------------------------------------------------------------------------------


async def test_a_locked_database_refuses_clearly_runs_nothing_and_keeps_the_loop_free(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid, other = call_id(), call_id()
    approval_id = await _approved(bench, gw, "ops_deploy", {"service": "billing"}, cid)
    undecided = (await bench.invoke(gw, "ops_deploy", {"service": "search"}, call_id=other)).json()["approval_id"]
    health = bench.rest(gw, "dave")

    async with locked(_db(gw)), in_background(
            bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)) as retry:
        # The retry waits for the lock (the 2 s busy timeout) on a worker thread, not on the event loop: the
        # loop answers one health check after another meanwhile (a blocked loop answers none until the retry
        # is over). Counted, not timed.
        answered = 0
        while not retry.done():
            assert (await health.get("/healthz")).status_code == 200
            answered += not retry.done()
        assert answered >= 3, answered
        response = await finished(retry)
        vote = await bench.decide(gw, "bob", undecided)
        listing = await bench.rest(gw, "dave").get("/v1/approvals")  # reads still work under a write lock

    body = response.json()
    assert (response.status_code, body["decision"], body["is_error"]) == (200, "store_unavailable", True)
    assert "database is busy" in body["content"][0]["text"]
    assert (vote.status_code, vote.json()["error"]["code"]) == (503, "store-unavailable")
    assert listing.status_code == 200
    assert bench.upstream.ran("deploy") == 0
    assert (await bench.approval(gw, approval_id))["state"] == "approved"  # not stuck in "executing"
    ran = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert (ran.status_code, ran.json()["is_error"]) == (200, False), ran.text
    assert bench.upstream.ran("deploy") == 1
    assert (await bench.approval(gw, approval_id))["state"] == "executed"


async def test_a_result_that_cannot_be_stored_yet_is_still_returned_and_stored_once_the_lock_lifts(bench, call_id):
    gw = await bench.start(SLOW)
    cid = call_id()
    args = {"seconds": "until-released"}
    approval_id = await _approved(bench, gw, "ops_slow", args, cid)
    async with in_background(bench.invoke(gw, "ops_slow", args, call_id=cid)) as running:
        await _until(lambda: bench.upstream.ran("slow") == 1)
        async with locked(_db(gw)):
            bench.upstream.released.set()
            response = await finished(running)  # the run ends while its result cannot be written
            again = await bench.invoke(gw, "ops_slow", args, call_id=cid)
            assert (await bench.approval(gw, approval_id))["state"] == "executing"

    result = response.json()
    assert (response.status_code, result["is_error"], result["structured"]["run"]) == (200, False, 1)
    assert again.json()["structured"] == result["structured"]
    deadline = time.monotonic() + STEP_SECONDS
    while (stored := await bench.approval(gw, approval_id))["state"] != "executed":
        assert time.monotonic() < deadline, stored["state"]
        await asyncio.sleep(0.1)
    replay = await bench.invoke(gw, "ops_slow", args, call_id=cid)
    assert replay.json()["structured"] == result["structured"]
    assert bench.upstream.ran("slow") == 1


# --- many retries at once ---------------------------------------------------------------------------------


async def test_two_hundred_concurrent_retries_of_an_approved_call_all_get_its_outcome(bench, call_id):
    # one key with 200 requests at once: its share, and a pool where that is less than a third (the rest stays free)
    gw = await bench.start(SLOW, http={"max_connections": 1000, "max_connections_per_principal": 200})
    cid = call_id()
    args = {"seconds": "0.5"}
    await _approved(bench, gw, "ops_slow", args, cid)
    body = {"arguments": args, "call_id": cid}
    async with httpx2.AsyncClient(base_url=gw.url, headers=auth_header("alice"), timeout=httpx2.Timeout(60),
                                  limits=httpx2.Limits(max_connections=200)) as client:
        responses = await asyncio.gather(*(client.post("/v1/tools/ops_slow/invoke", json=body) for _ in range(200)))

    assert sorted({r.status_code for r in responses}) == [200]
    assert {r.json()["is_error"] for r in responses} == {False}
    assert {r.json()["structured"]["run"] for r in responses} == {1}
    assert bench.upstream.ran("slow") == 1


# --- who sees what -------------------------------------------------------------------------------------------

ADMIN_KEY = "root-admin-key-9"
TWO_GROUPS = policy(approve_rule("deploys-need-ops", "ops_deploy", approvers=["group:ops"]),
                    approve_rule("notes-need-security", "ops_vanishing", approvers=["group:security"]))


async def test_approvers_see_only_what_their_groups_may_decide_and_admins_see_all(bench, call_id):
    keys = [*api_keys(), {"principal": {"id": "root", "groups": []}, "sha256": hash_key(ADMIN_KEY),
                          "approver": True, "admin": True}]
    config = bench.configs.base({"name": "ops", "mcp": {"url": f"{bench.upstream.url}/mcp"}},
                                auth={"api_keys": keys}, approvals={"public_url": PUBLIC_URL})
    gw = await bench.stack.enter_async_context(
        bench.gateway(bench.configs.write(bench.root / "gw-visibility", config, {"approvals.yaml": TWO_GROUPS})))
    deploy = (await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=call_id())).json()["approval_id"]
    note = (await bench.invoke(gw, "ops_vanishing", {"note": "hello"}, call_id=call_id())).json()["approval_id"]

    async def listed(who: str | None, **params: str) -> list[str]:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"} if who is None else auth_header(who)
        response = await bench.rest(gw, "alice").get("/v1/approvals", params=params, headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["total"] == len(response.json()["approvals"])
        return sorted(a["id"] for a in response.json()["approvals"])

    assert await listed("bob") == [deploy]
    assert await listed("carol") == [note]
    assert await listed("dave") == sorted([deploy, note])
    assert await listed("erin") == []
    assert await listed(None) == sorted([deploy, note])  # the admin
    shown = await bench.rest(gw, "bob").get(f"/v1/approvals/{note}")
    assert shown.status_code == 404  # not bob's to decide, so not his to read
    assert (await bench.rest(gw, "alice").get(f"/v1/approvals/{note}")).status_code == 200  # she asked
    assert (await bench.decide(gw, "bob", note)).status_code == 403
    root = await bench.rest(gw, "alice").post(f"/v1/approvals/{note}/decision", json={"approve": True},
                                              headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert root.status_code == 403  # an admin sees all, and still decides only what names them
    assert (await bench.rest(gw, "frank").get("/v1/approvals")).status_code == 403
    assert PEOPLE["frank"][2] is False

    # Filters, across everything the approver may see.
    assert await listed("dave", tool="ops_vanishing") == [note]
    assert await listed("dave", principal="alice") == sorted([deploy, note])
    assert await listed("dave", principal="bob") == []
    assert await listed("dave", q="BILLING") == [deploy]
    assert await listed("dave", state="approved") == []
    page = await bench.rest(gw, "dave").get("/v1/approvals", params={"limit": 1, "offset": 1})
    assert (len(page.json()["approvals"]), page.json()["total"]) == (1, 2)
    too_long = await bench.rest(gw, "dave").get("/v1/approvals", params={"q": "x" * 201})
    assert (too_long.status_code, too_long.json()["error"]["code"]) == (400, "invalid-filter")
