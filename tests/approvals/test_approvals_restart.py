"""Approvals outlive the gateway process: stop it, start a new one on the same config and SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from approval_support import STEP_SECONDS, approve_rule, call_meta, in_background, policy
from mcp import MCPError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

OPS_ONLY = policy(approve_rule("deploys-need-ops", approvers=["group:ops"]))
RESULT = {"tool": "deploy", "args": {"service": "billing"}, "run": 1}




async def test_a_pending_approval_survives_a_restart_and_its_retry_runs_once(bench, call_id):
    config = bench.write(OPS_ONLY)
    cid = call_id()
    async with bench.gateway(config) as first:
        held = await bench.invoke(first, "ops_deploy", {"service": "billing"}, call_id=cid)
        assert held.status_code == 202, held.text
        approval_id = held.json()["approval_id"]

    async with bench.gateway(config) as second:
        [pending] = await bench.pending(second)
        assert (pending["id"], pending["call_id"], pending["state"]) == (approval_id, cid, "pending")
        assert (pending["tool"], pending["final_args"], pending["principal"]["id"]) == (
            "ops_deploy", {"service": "billing"}, "alice")
        decided = await bench.decide(second, "bob", approval_id, comment="after the restart")
        assert (decided.status_code, decided.json()["state"]) == (200, "approved")

        async with bench.mcp(second, "alice") as client:  # the retry may come through either frontend
            result = await client.call_tool("ops_deploy", {"service": "billing"}, meta=call_meta(cid),
                                            read_timeout_seconds=STEP_SECONDS)
        assert (result.is_error, result.structured_content) == (False, RESULT)
        again = await bench.invoke(second, "ops_deploy", {"service": "billing"}, call_id=cid)
        assert (again.status_code, again.json()["structured"]) == (200, RESULT)
        assert bench.upstream.ran("deploy") == 1
        assert await bench.pending(second) == []

    async with bench.gateway(config) as third:  # the stored result outlives the process too
        replay = await bench.invoke(third, "ops_deploy", {"service": "billing"}, call_id=cid)
        assert (replay.status_code, replay.json()["structured"]) == (200, RESULT)
        assert replay.json()["meta"]["gateway/approval_id"] == approval_id
        assert (await bench.approval(third, approval_id))["state"] == "executed"
    assert bench.upstream.ran("deploy") == 1


async def test_an_mcp_call_held_when_the_gateway_stops_gets_its_result_on_retry_after_the_restart(bench, call_id):
    config = bench.write(OPS_ONLY)
    cid = call_id()
    async with contextlib.AsyncExitStack() as running:
        first = await running.enter_async_context(bench.gateway(config))
        async with bench.mcp(first, "alice") as client, in_background(client.call_tool(
                "ops_deploy", {"service": "billing"}, meta=call_meta(cid))) as call:
            approval_id = (await bench.wait_pending(first, cid))["id"]
            stopping = time.monotonic()
            await running.aclose()  # the gateway stops while the client is still waiting
            stopped_in = time.monotonic() - stopping
            [lost] = await asyncio.wait_for(asyncio.gather(call, return_exceptions=True), STEP_SECONDS)
    # the client learns its wait ended without an answer; nothing ran, and the approval is on disk
    assert isinstance(lost, MCPError) or lost.is_error, lost
    assert stopped_in < STEP_SECONDS
    assert bench.upstream.ran("deploy") == 0

    async with bench.gateway(config) as second:
        assert [a["id"] for a in await bench.pending(second)] == [approval_id]
        assert (await bench.decide(second, "carol", approval_id)).status_code == 403  # security, not ops
        assert (await bench.decide(second, "bob", approval_id)).status_code == 200
        async with bench.mcp(second, "alice") as client:
            result = await client.call_tool("ops_deploy", {"service": "billing"}, meta=call_meta(cid),
                                            read_timeout_seconds=STEP_SECONDS)

    assert (result.is_error, result.structured_content) == (False, RESULT)
    assert result.meta["gateway/approval_id"] == approval_id
    assert bench.upstream.ran("deploy") == 1

