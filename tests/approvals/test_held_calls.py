"""Held calls that outlast a client's timeout (issue 8 part 2), with real MCP and HTTP clients on loopback.

A call that needs approval is held for ``approval.hold``, then answered "pending, call again with the same
arguments" as a normal result; a retry without a call id binds to the same request by (principal, run,
tool, final arguments); an approval given after the client left runs at the retry, once; what became of
the call shows in the API, the CLI and the audit log.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import pytest
from approval_support import PAGE_URL, PEOPLE, STEP_SECONDS, auth_header, policy, text_of
from cli_run import run_cli_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.core.limits import DEFAULT_APPROVAL_HOLD_SECONDS
from gateway.policy.load import load_policy_set

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

DEPLOY = "ops_deploy"


def held_rule(hold: str = "1s", timeout: str = "30s", valid_for: str = "") -> str:
    """Deploys need ops; the MCP call is held ``hold`` before it is answered "pending"."""
    extra = f", valid_for: {valid_for}" if valid_for else ""
    return policy("  - id: deploys-need-ops\n    tools: [ops_deploy]\n    action: approve\n"
                  "    message: Deploys need ops.\n"
                  f'    approval: {{approvers: ["group:ops"], timeout: {timeout}, hold: {hold}{extra}}}\n')


def run_id() -> str:
    return f"run-{uuid.uuid4().hex}"


@asynccontextmanager
async def modern(gw: Any, run: str | None, who: str = "alice") -> AsyncIterator[Client]:
    """An MCP client of the 2026-07-28 era (no protocol session, no call id), in run ``run``."""
    headers = {**auth_header(who), **({"X-Gateway-Session": run} if run else {})}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(gw.mcp_url, http_client=http), mode="auto") as client:
        yield client


async def call(client: Client, args: dict[str, Any], read_timeout: float = STEP_SECONDS) -> types.CallToolResult:
    """A tools/call with a client read timeout shorter than an approval's 30 s and far longer than the 1 s hold
    (so a loaded machine answering late does not time it out)."""
    return await client.call_tool(DEPLOY, args, read_timeout_seconds=read_timeout)


def rest(gw: Any, run: str, who: str = "alice") -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=gw.url, headers={**auth_header(who), "X-Gateway-Session": run},
                              timeout=httpx2.Timeout(30))


async def requests_for(bench: Any, gw: Any, service: str) -> list[dict[str, Any]]:
    response = await bench.rest(gw, "dave").get("/v1/approvals", params={"q": service})
    assert response.status_code == 200, response.text
    return [a for a in response.json()["approvals"] if a["final_args"] == {"service": service}]


async def eventually(check: Any, seconds: float = STEP_SECONDS) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def assert_pending(result: types.CallToolResult) -> str:
    """A pending answer the model can act on; returns the approval id."""
    text = text_of(result)
    assert result.is_error is False, text  # frameworks hide an error's text by default (MAF)
    assert result.meta is not None and result.meta["gateway/pending"] is True
    approval_id: str = result.meta["gateway/approval_id"]
    assert result.meta["gateway/decision"] == "pending" and result.meta["gateway/expires_at"]
    assert "has not run yet" in text and approval_id in text and f"{PAGE_URL}/{approval_id}" in text
    assert "again with exactly the same arguments" in text and result.meta["gateway/expires_at"] in text
    return approval_id


# --- the hold ----------------------------------------------------------------------------------------------


def test_the_default_hold_is_below_a_five_second_client_timeout(tmp_path):
    (tmp_path / "p.yaml").write_text(policy(
        "  - id: a\n    tools: [ops_deploy]\n    action: approve\n"
        "  - id: b\n    tools: [ops_deploy]\n    action: approve\n    approval: {hold: 2s}\n"), encoding="utf-8")
    rules = {r.id: r for p in load_policy_set([tmp_path / "p.yaml"]).policies for r in p.rules}
    assert DEFAULT_APPROVAL_HOLD_SECONDS < 5  # the OpenAI Agents SDK's MCP read timeout
    assert rules["approvals/a"].approval.hold_seconds == DEFAULT_APPROVAL_HOLD_SECONDS
    assert rules["approvals/b"].approval.hold_seconds == 2.0


async def test_a_held_call_answers_pending_before_the_clients_timeout(bench):
    gw = await bench.start(held_rule(hold="1s"))
    async with modern(gw, run_id()) as client:
        started = time.monotonic()
        # the approval waits 30 s: answered within the client's 10 s only because the hold ended it
        result = await call(client, {"service": "billing"}, read_timeout=STEP_SECONDS)
    assert time.monotonic() - started >= 0.9  # held for its second first (a lower bound: load only adds to it)
    approval_id = assert_pending(result)
    # Nothing but the instruction for the model: MAF and pydantic-ai show structured content instead of text.
    assert result.structured_content is None
    assert [block.type for block in result.content] == ["text"] and text_of(result).startswith("Approval pending:")
    assert bench.upstream.ran("deploy") == 0
    stored = await bench.approval(gw, approval_id)
    assert stored["state"] == "pending" and stored["bound_by"] == "run"
    assert stored["execution"]["state"] == "awaiting_decision"


async def test_the_shortest_hold_of_several_rules_wins(bench):
    gw = await bench.start(held_rule(hold="20s") + held_rule(hold="1s").split("rules:\n", 1)[1].replace(
        "deploys-need-ops", "second-look"))
    async with modern(gw, run_id()) as client:
        assert_pending(await call(client, {"service": "billing"}, read_timeout=STEP_SECONDS))  # the 20 s one would not


async def test_rest_wait_still_answers_202_and_binds_to_the_same_request_as_mcp(bench):
    gw = await bench.start(held_rule(hold="1s"))
    run = run_id()
    async with rest(gw, run) as http:
        started = time.monotonic()
        held = await http.post(f"/v1/tools/{DEPLOY}/invoke", params={"wait": "1"},
                               json={"arguments": {"service": "billing"}})
        assert time.monotonic() - started >= 0.9
    assert held.status_code == 202, held.text
    body = held.json()
    assert body["decision"] == "pending" and "again with exactly the same arguments" in body["message"]
    async with modern(gw, run) as client:  # the same run over MCP: the same request
        assert assert_pending(await call(client, {"service": "billing"})) == body["approval_id"]
    assert len(await requests_for(bench, gw, "billing")) == 1


# --- a retry binds to the same request --------------------------------------------------------------------


async def test_a_retry_without_a_call_id_binds_to_the_same_request_and_runs_once(bench):
    gw = await bench.start(held_rule(hold="1s"))
    run = run_id()
    async with modern(gw, run) as client:
        first = assert_pending(await call(client, {"service": "billing"}))
        again = assert_pending(await call(client, {"service": "billing"}))
        assert again == first
        # Another run, other arguments, another key: each its own request, never this one.
        async with modern(gw, run_id()) as other_run:
            assert assert_pending(await call(other_run, {"service": "billing"})) != first
        assert assert_pending(await call(client, {"service": "search"})) != first
        async with modern(gw, run, who="bob") as other_key:
            assert assert_pending(await call(other_key, {"service": "billing"})) != first

        assert (await bench.decide(gw, "dave", first)).status_code == 200
        waiting = await bench.approval(gw, first)
        assert waiting["execution"]["state"] == "awaiting_call"
        assert waiting["execution"]["label"] == \
            f"approved, waiting for the agent to call again (until {waiting['valid_until']})"
        assert bench.upstream.ran("deploy") == 0  # a late approval runs at the retry, not before

        ran = await call(client, {"service": "billing"})
        assert ran.is_error is False and ran.structured_content["args"] == {"service": "billing"}, text_of(ran)
        assert ran.meta["gateway/approval_id"] == first
        assert bench.upstream.ran("deploy", service="billing") == 1
        done = await bench.approval(gw, first)
        assert done["state"] == "executed" and done["execution"]["state"] == "ran"
        assert done["execution"]["label"] == f"ran at {done['executed_at']}: ok"

        # Its outcome was given: the next identical call in the run is a new decision.
        fresh = assert_pending(await call(client, {"service": "billing"}))
    assert fresh != first
    assert bench.upstream.ran("deploy", service="billing") == 1


async def test_concurrent_retries_make_one_request_and_one_execution(bench):
    gw = await bench.start(held_rule(hold="1s"))
    run = run_id()
    async with rest(gw, run) as http:
        async def invoke() -> httpx2.Response:
            return await http.post(f"/v1/tools/{DEPLOY}/invoke", json={"arguments": {"service": "billing"}})

        asked = await asyncio.gather(*(invoke() for _ in range(6)))
        assert {r.status_code for r in asked} == {202}, [r.text for r in asked]
        [approval_id] = {r.json()["approval_id"] for r in asked}
        assert len(await requests_for(bench, gw, "billing")) == 1
        assert (await bench.decide(gw, "dave", approval_id)).status_code == 200

        retries = await asyncio.gather(*(invoke() for _ in range(6)))
    assert {r.status_code for r in retries} == {200}, [r.text for r in retries]
    assert {json.dumps(r.json()["structured"]) for r in retries} == {json.dumps(retries[0].json()["structured"])}
    assert len({r.json()["call_id"] for r in retries}) == 6  # each retry answered under its own call id
    assert bench.upstream.ran("deploy") == 1
    assert len(await requests_for(bench, gw, "billing")) == 1


async def test_a_call_id_still_binds_as_before(bench):
    gw = await bench.start(held_rule(hold="1s"))
    cid = f"c-{uuid.uuid4().hex}"
    async with modern(gw, run_id()) as client:
        first = await client.call_tool(DEPLOY, {"service": "billing"}, meta={"gateway/call_id": cid},
                                       read_timeout_seconds=STEP_SECONDS)
        approval_id = assert_pending(first)
        assert (await bench.approval(gw, approval_id))["bound_by"] == "call_id"
        # Another call id in the same run is another call: its own request.
        other = await client.call_tool(DEPLOY, {"service": "billing"}, meta={"gateway/call_id": f"{cid}-2"},
                                       read_timeout_seconds=STEP_SECONDS)
        assert assert_pending(other) != approval_id


# --- denied, expired: told once, then a new decision ----------------------------------------------------


async def test_a_denial_is_told_once_then_the_same_call_asks_again(bench):
    gw = await bench.start(held_rule(hold="1s"))
    async with modern(gw, run_id()) as client:
        first = assert_pending(await call(client, {"service": "billing"}))
        assert (await bench.decide(gw, "dave", first, approve=False, comment="not today")).status_code == 200
        told = await call(client, {"service": "billing"})
        assert told.is_error is True and text_of(told) == "Denied by an approver: not today"
        assert told.meta["gateway/approval_id"] == first
        again = assert_pending(await call(client, {"service": "billing"}))
    assert again != first
    assert (await bench.approval(gw, first))["execution"]["state"] == "not_run"
    assert bench.upstream.ran("deploy") == 0


async def test_an_expiry_is_told_once_then_the_same_call_asks_again(bench):
    gw = await bench.start(held_rule(hold="1s", timeout="2s"))
    async with modern(gw, run_id()) as client:
        first = assert_pending(await call(client, {"service": "billing"}))

        async def expired() -> bool:
            return (await bench.approval(gw, first))["state"] == "expired"

        await eventually(expired)  # the sweeper expires it while nobody waits
        told = await call(client, {"service": "billing"})
        assert told.is_error is True and text_of(told) == "Nobody approved this call in time, so it was not run."
        again = assert_pending(await call(client, {"service": "billing"}))
    assert again != first and bench.upstream.ran("deploy") == 0


# --- an approval never used -----------------------------------------------------------------------------


async def test_an_approval_the_agent_never_uses_shows_expired_unused_and_is_audited(bench):
    gw = await bench.start(held_rule(hold="1s", valid_for="1s"))
    async with modern(gw, run_id()) as client:
        first = assert_pending(await call(client, {"service": "billing"}))
        assert (await bench.decide(gw, "dave", first)).status_code == 200

        async def lapsed() -> dict[str, Any] | None:
            stored = await bench.approval(gw, first)
            return stored if stored["execution"]["state"] == "expired_unused" else None

        stored = await eventually(lapsed)  # nobody called again: the sweeper lapses it
        assert stored["state"] == "expired"
        assert stored["execution"]["label"].startswith("expired unused at ")
        [event] = [e for e in gw.audit_events() if e.get("event") == "approval.lapsed"]
        assert event["approval_id"] == first and event["tool"] == DEPLOY and event["principal"]["id"] == "alice"
        assert event["execution"]["state"] == "expired_unused" and "not used within 1s" in event["reason"]

        told = await call(client, {"service": "billing"})  # the agent comes back too late: told so, once
        assert told.is_error is True and "expired unused" in text_of(told), text_of(told)
        again = assert_pending(await call(client, {"service": "billing"}))
    assert again != first and bench.upstream.ran("deploy") == 0


async def test_the_cli_shows_what_became_of_the_call(bench):
    gw = await bench.start(held_rule(hold="1s"))
    async with modern(gw, run_id()) as client:
        first = assert_pending(await call(client, {"service": "billing"}))
        assert (await bench.decide(gw, "dave", first)).status_code == 200
        waiting = await cli("show", first, url=gw.url)
        assert "The call:      approved, waiting for the agent to call again (until " in waiting
        await call(client, {"service": "billing"})
    shown = await cli("show", first, url=gw.url)
    executed_at = (await bench.approval(gw, first))["executed_at"]
    assert f"The call:      ran at {executed_at}: ok" in shown
    listed = await cli("list", "--state", "all", url=gw.url)
    assert f"ran at {executed_at}: ok" in next(line for line in listed.splitlines() if line.startswith(first))


async def cli(*args: str, url: str) -> str:
    """`gateway approvals ARGS` as dave, in this process (tests/cli has its real process)."""
    done = await run_cli_async("approvals", *args, "--url", url, "--key", PEOPLE["dave"][0])
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_an_end_user_answering_an_elicitation_is_not_cut_short_by_the_hold(bench):
    """A client that declared elicitation is asking its user: the hold does not end the call under them."""
    gw = await bench.start(held_rule(hold="1s").replace('approvers: ["group:ops"]',
                                                        "approvers: [self], via: elicitation"))
    asked: list[str] = []

    async def slow_yes(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        await asyncio.sleep(1.5)  # longer than the hold
        return types.ElicitResult(action="accept", content={"approve": True})

    async with bench.mcp(gw, "alice", elicit=slow_yes) as client:
        result = await client.call_tool(DEPLOY, {"service": "billing"}, read_timeout_seconds=STEP_SECONDS)
    assert len(asked) == 1
    assert result.is_error is False and result.structured_content["args"] == {"service": "billing"}, text_of(result)
    assert bench.upstream.ran("deploy", service="billing") == 1
