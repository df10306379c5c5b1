"""Issue 21's policy end to end: the gateway under uvicorn in front of a real HTTP API, driven through REST (httpx2)
and MCP (the SDK's client), with a real approver deciding through the approvals API.

Labels from a response-stage rule make the next egress call need a person; a spend cap per run counts admitted
transfers (an approved one when it is released, decided again then); a distinct-recipient cap; and 200 REST calls
racing one cap on one gateway admit exactly what fits."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from flow_support import (
    EGRESS_AFTER_UNTRUSTED,
    SPEND_CAP,
    TRANSFER,
    approve_rule,
    cap_rule,
    distinct_tally,
    egress_rule,
    label_rule,
    object_schema,
    policy,
    recipient_cap_rule,
    sum_tally,
)

from gateway.auth.keys import hash_key
from gateway.pipeline.results import APPROVAL_KEPT, STORE_UNAVAILABLE

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

BOB = {"approvers": ["user:bob"], "timeout": "60s"}
FLOWS = policy("flows", tallies=[sum_tally(), distinct_tally()], rules=[
    label_rule(),
    egress_rule("nothing-leaves-after-untrusted-content", tools=None, when=EGRESS_AFTER_UNTRUSTED, approval=BOB),
    approve_rule("big-transfers-need-a-person", "double(args.amount) >= 500.0", tools=[TRANSFER],
                 message="Transfers of 500 USD or more need a person.", approval=BOB),
    cap_rule(),
    recipient_cap_rule(3, message="This run may write to at most 3 different people."),
])

WORLD = {"openWorldHint": True}


def _tools() -> list[dict[str, Any]]:
    """The HTTP API's routes as an agent's tools: a read of the web, a mail out, a payment (all egress but the read)."""
    return [
        {"name": "web_fetch", "method": "GET", "path": "/search", "input_schema": object_schema(q="string"),
         "annotations": {**WORLD, "readOnlyHint": True}},
        {"name": "mail_send", "method": "POST", "path": "/items",
         "input_schema": object_schema(to="string", name="string"), "annotations": {**WORLD, "readOnlyHint": False}},
        {"name": "payments_transfer", "method": "POST", "path": "/items",
         "input_schema": object_schema(amount="number", name="string"),
         "annotations": {**WORLD, "readOnlyHint": False}},
    ]


@pytest_asyncio.fixture(loop_scope="session")
async def flows(start_gateway: Any, configs: Any, http_api: Any, keys: dict[str, str]) -> Any:
    """A gateway with the flows policy in front of the HTTP API (tools unprefixed); bob may approve."""
    people = [{"principal": {"id": "alice", "groups": ["staff"]}, "sha256": hash_key(keys["alice"])},
              {"principal": {"id": "bob", "groups": ["staff"]}, "sha256": hash_key(keys["bob"]), "approver": True}]
    config = configs.base(configs.http_upstream("api", http_api.url, _tools(), prefix=""),
                          auth={"api_keys": people}, approvals={"public_url": "http://approvals.example.test"},
                          http={"max_connections": 1000, "max_connections_per_principal": 400})  # 200 at once
    return await start_gateway(config, {"flows.yaml": FLOWS})


def _marker() -> str:
    return f"m-{uuid.uuid4().hex[:12]}"


async def _approve(rest: Any, gateway: Any, approval_id: str) -> None:
    answer = await rest(gateway, "bob").post(f"/v1/approvals/{approval_id}/decision", json={"approve": True})
    assert answer.status_code == 200, answer.text


async def _pending_of(rest: Any, gateway: Any, call_id: str) -> str:
    """The id of the call's pending approval, once the held call has made it."""
    deadline = time.monotonic() + 10
    while True:
        answer = await rest(gateway, "bob").get("/v1/approvals", params={"state": "pending"})
        found = [a["id"] for a in answer.json()["approvals"] if a["call_id"] == call_id]
        if found:
            return str(found[0])
        assert time.monotonic() < deadline, f"no pending approval for {call_id}"
        await asyncio.sleep(0.02)


async def test_untrusted_content_then_egress_needs_a_person_over_rest(flows: Any, rest: Any, rest_call: Any,
                                                                      http_api: Any) -> None:
    alice, mark = rest(flows, "alice"), _marker()
    before = await rest_call(alice, "mail_send", {"to": "a@x.test", "name": f"{mark}-before"})
    fetched = await rest_call(alice, "web_fetch", {"q": f"{mark}-page"}, call_id=f"{mark}-fetch")
    held = await rest_call(alice, "mail_send", {"to": "a@x.test", "name": f"{mark}-after"}, call_id=f"{mark}-send")

    assert (before["decision"], fetched["decision"]) == ("allow", "allow")
    assert (held["_status"], held["decision"]) == (202, "pending")
    assert flows.audit_event(f"{mark}-send")["decided_by"] == ["flows/nothing-leaves-after-untrusted-content"]
    assert http_api.seen(f"{mark}-after") == []
    event = flows.audit_event(f"{mark}-fetch")
    assert event["flow"]["labels_added"] == {"request": [], "response": ["untrusted"]}
    assert event["flow"]["labels"] == ["untrusted"]

    await _approve(rest, flows, held["approval_id"])
    ran = await rest_call(alice, "mail_send", {"to": "a@x.test", "name": f"{mark}-after"}, call_id=f"{mark}-send")

    assert (ran["decision"], ran["is_error"]) == ("approve", False)
    assert len(http_api.seen(f"{mark}-after")) == 1
    sent = [e for e in flows.audit_events() if e.get("call_id") == f"{mark}-send" and e["event"] == "call.outcome"]
    assert sent[-1]["context"]["session"]["labels"] == ["untrusted"]


async def test_an_approved_transfer_counts_when_released_and_is_refused_if_the_cap_filled_meanwhile(
        flows: Any, rest: Any, rest_call: Any, http_api: Any) -> None:
    alice, mark = rest(flows, "alice"), _marker()

    async def transfer(amount: float, call_id: str, **body: Any) -> dict[str, Any]:
        answer: dict[str, Any] = await rest_call(alice, "payments_transfer", {"amount": amount, "name": call_id},
                                                 call_id=call_id, **body)
        return answer

    # held on its connection while the run moves 500: it counted nothing when it was held
    held = asyncio.create_task(alice.post("/v1/tools/payments_transfer/invoke", params={"wait": "30s"}, json={
        "arguments": {"amount": 600, "name": f"{mark}-big"}, "call_id": f"{mark}-big"}))
    approval_id = await _pending_of(rest, flows, f"{mark}-big")
    small = [await transfer(amount, f"{mark}-small-{i}") for i, amount in enumerate((300, 200))]
    assert [s["decision"] for s in small] == ["allow", "allow"]

    await _approve(rest, flows, approval_id)
    released = (await asyncio.wait_for(held, 10)).json()  # admitted again: 500 + 600 > 1000, refused now

    assert (released["decision"], released["is_error"]) == ("reject", True)
    assert released["content"][0]["text"] == SPEND_CAP
    assert http_api.seen(f"{mark}-big") == []
    approval = (await rest(flows, "bob").get(f"/v1/approvals/{approval_id}")).json()
    assert approval["state"] == "executed"  # the refusal is the approval's one execution
    assert SPEND_CAP in approval["execution"]["outcome"]
    execution = approval["execution"]  # shown as refused when released, not as "ran"
    assert (execution["state"], execution["reason"], execution["rule"]) == (
        "refused_at_release", SPEND_CAP, "flows/spend-cap")
    assert execution["label"] == f"refused when released at {execution['at']}: {SPEND_CAP}"
    assert released["meta"]["gateway/refused_at_release"] == "flows/spend-cap"
    event = flows.audit_event(f"{mark}-big")
    assert event["decided_by"] == ["flows/big-transfers-need-a-person", "flows/spend-cap"]
    assert event["flow"]["tallies"] == {}

    fits = await transfer(500, f"{mark}-fits")  # one that fits, approved, then called again: counted as released
    await _approve(rest, flows, fits["approval_id"])
    counted = await transfer(500, f"{mark}-fits")
    assert (counted["decision"], counted["is_error"]) == ("approve", False)
    assert len(http_api.seen(f"{mark}-fits")) == 1
    outcome = [e for e in flows.audit_events() if e.get("call_id") == f"{mark}-fits" and e["event"] == "call.outcome"]
    assert outcome[-1]["flow"]["tallies"] == {"transferred": {"before": 500.0, "after": 1000.0}}
    assert (await transfer(1, f"{mark}-one"))["content"][0]["text"] == SPEND_CAP  # full: 1 USD more is refused



async def test_a_store_failure_at_release_refuses_the_call_and_the_approval_stays_usable(
        flows: Any, rest: Any, rest_call: Any, http_api: Any) -> None:
    alice, mark = rest(flows, "alice"), _marker()
    call_id = f"{mark}-big"

    async def transfer() -> dict[str, Any]:
        answer: dict[str, Any] = await rest_call(alice, "payments_transfer", {"amount": 600, "name": call_id},
                                                 call_id=call_id)
        return answer

    # held on its connection (admitted as "approve", counting nothing); the store fails before it is released
    held = asyncio.create_task(alice.post("/v1/tools/payments_transfer/invoke", params={"wait": "30s"}, json={
        "arguments": {"amount": 600, "name": call_id}, "call_id": call_id}))
    approval_id = await _pending_of(rest, flows, call_id)
    database = flows.config.path(flows.config.spec.store.sqlite)
    with sqlite3.connect(database) as db:  # the tallies' lock table is gone: the admission at release fails
        db.execute("ALTER TABLE tally_locks RENAME TO tally_locks_away")
    try:
        await _approve(rest, flows, approval_id)
        refused = (await asyncio.wait_for(held, 10)).json()
    finally:
        with sqlite3.connect(database) as db:
            db.execute("ALTER TABLE tally_locks_away RENAME TO tally_locks")

    assert (refused["decision"], refused["is_error"]) == ("tool_failed", True)
    assert refused["content"][0]["text"] == f"{STORE_UNAVAILABLE} {APPROVAL_KEPT}"
    assert http_api.seen(call_id) == []  # fail closed: nothing ran, and nothing was counted
    approval = (await rest(flows, "bob").get(f"/v1/approvals/{approval_id}")).json()
    assert approval["state"] == "approved"  # given back: the approval was not used up
    run = await flows.gateway.store.session("alice", alice.headers["X-Gateway-Session"])
    assert run.tallies.values.get("transferred", 0.0) == 0.0

    ran = await transfer()  # the store is back: the retry is admitted, counted and run, once
    assert (ran["decision"], ran["is_error"]) == ("approve", False)
    assert len(http_api.seen(call_id)) == 1
    outcomes = [e for e in flows.audit_events() if e.get("call_id") == call_id and e["event"] == "call.outcome"]
    assert outcomes[-1]["flow"]["tallies"] == {"transferred": {"before": 0.0, "after": 600.0}}


async def test_caps_and_labels_over_mcp(flows: Any, connect_mcp: Any, rest: Any, http_api: Any) -> None:
    mark = _marker()
    async with connect_mcp(flows, "alice") as conn:
        first = await conn.call("payments_transfer", {"amount": 400, "name": f"{mark}-1"})
        second = await conn.call("payments_transfer", {"amount": 400, "name": f"{mark}-2"})
        third = await conn.call("payments_transfer", {"amount": 400, "name": f"{mark}-3"})
        mails = [await conn.call("mail_send", {"to": to, "name": f"{mark}-{to}"})
                 for to in ("a@x.test", "b@x.test", "c@x.test", "d@x.test", "a@x.test")]
        await conn.call("web_fetch", {"q": f"{mark}-page"})
        held = asyncio.create_task(conn.call("mail_send", {"to": "a@x.test", "name": f"{mark}-out"},
                                             call_id=f"{mark}-out"))
        await _approve(rest, flows, await _pending_of(rest, flows, f"{mark}-out"))
        out = await asyncio.wait_for(held, 10)

    assert [r.is_error for r in (first, second, third)] == [False, False, True]
    assert _text(third) == SPEND_CAP
    assert [m.is_error for m in mails] == [False, False, False, True, False]
    assert _text(mails[3]) == "This run may write to at most 3 different people."
    assert http_api.seen(f"{mark}-3") == [] and http_api.seen(f"{mark}-d@x.test") == []
    assert (out.is_error, len(http_api.seen(f"{mark}-out"))) == (False, 1)
    run = await flows.gateway.store.session("alice", flows.audit_event(f"{mark}-out")["session"])
    assert run.labels == ["untrusted"]
    assert (run.tallies.values["transferred"], run.tallies.values["recipients"]) == (800.0, 3)
    assert [h["tool"] for h in run.history][-2:] == ["web_fetch", "mail_send"]


async def test_two_hundred_concurrent_rest_calls_racing_a_cap_admit_exactly_what_fits(
        flows: Any, rest: Any, rest_call: Any, http_api: Any) -> None:
    alice, mark = rest(flows, "alice"), _marker()

    bodies = await asyncio.gather(*(rest_call(alice, "payments_transfer", {"amount": 10, "name": f"{mark}-{i}"})
                                    for i in range(200)))

    decisions = [b["decision"] for b in bodies]
    assert (decisions.count("allow"), decisions.count("reject")) == (100, 100)
    assert len(http_api.seen(mark)) == 100
    run = await flows.gateway.store.session("alice", alice.headers["X-Gateway-Session"])
    assert run.tallies.values["transferred"] == 1000.0


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
