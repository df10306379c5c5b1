"""Held calls (approval pending) as MCP tasks, for clients that declared tasks (issue 8 §2, docs/runs.md).

A task-aware client gets a task instead of the "pending, call again" result: the task stays ``working`` while
the approval is pending (the hold does not cut it short), and completes with the call's result once an approver
decides and the call ran, once. Clients that declared nothing keep the pending result (test_held_calls.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from approval_support import auth_header, policy, text_of
from raw_mcp import INITIALIZE, MCP_HEADERS, message_of
from tasks_support import TasksClient, connect, raw

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

DEPLOY = "ops_deploy"
HELD = policy("  - id: deploys-need-ops\n    tools: [ops_deploy]\n    action: approve\n"
              "    message: Deploys need ops.\n"
              '    approval: {approvers: ["group:ops"], timeout: 30s, hold: 1s}\n')


async def pending_for(bench: Any, gw: Any, service: str) -> dict[str, Any]:
    for _ in range(200):
        found = [a for a in await bench.pending(gw) if a["final_args"] == {"service": service}]
        if found:
            assert len(found) == 1
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no pending approval")


async def test_modern_a_held_call_is_a_task_that_completes_once_approved(bench: Any) -> None:
    gw = await bench.start(HELD)
    tasks = TasksClient()
    async with connect(gw, "2026-07-28", extensions=[tasks]) as client:
        call = asyncio.ensure_future(client.call_tool(DEPLOY, {"service": "billing"}))
        approval = await pending_for(bench, gw, "billing")
        await asyncio.sleep(1.5)  # past the 1 s hold: a task is not answered "pending"
        assert not call.done() and tasks.created and tasks.seen[-1] == "working"
        assert bench.upstream.ran("deploy") == 0
        assert (await bench.decide(gw, "dave", approval["id"])).status_code == 200
        result = await asyncio.wait_for(call, 10)
    assert not result.is_error and text_of(result) == "deploy done (run 1)"
    assert bench.upstream.ran("deploy") == 1 and len(tasks.created) == 1
    assert approval["call_id"] == tasks.created[0]  # the approval and the audit name the task
    event = gw.audit_event(tasks.created[0])
    assert event["verdict"] == "approve" and event["approval"]["approved"] is True


async def test_modern_a_denied_held_call_completes_the_task_with_the_refusal(bench: Any) -> None:
    gw = await bench.start(HELD)
    tasks = TasksClient()
    async with connect(gw, "2026-07-28", extensions=[tasks]) as client:
        call = asyncio.ensure_future(client.call_tool(DEPLOY, {"service": "payroll"}))
        approval = await pending_for(bench, gw, "payroll")
        await asyncio.sleep(1.5)  # the task exists (a decision within the first second gives a plain result)
        await bench.decide(gw, "dave", approval["id"], approve=False, comment="not today")
        result = await asyncio.wait_for(call, 10)
    assert result.is_error and "not today" in text_of(result)
    assert bench.upstream.ran("deploy") == 0 and len(tasks.created) == 1


async def test_modern_without_the_extension_a_held_call_still_answers_pending(bench: Any) -> None:
    gw = await bench.start(HELD)
    async with connect(gw, "2026-07-28") as client:
        result = await client.call_tool(DEPLOY, {"service": "ledger"})
    assert result.meta is not None and result.meta["gateway/pending"] is True


async def test_legacy_a_held_call_asked_as_a_task_completes_once_approved(bench: Any) -> None:
    gw = await bench.start(HELD)
    async with connect(gw, "legacy") as client:
        created = await raw(client.session, "tools/call",
                            {"name": DEPLOY, "arguments": {"service": "search"}, "task": {"ttl": 120_000}})
        task_id = created["task"]["taskId"]
        approval = await pending_for(bench, gw, "search")
        await asyncio.sleep(1.5)
        assert (await raw(client.session, "tasks/get", {"taskId": task_id}))["status"] == "working"
        await bench.decide(gw, "dave", approval["id"])
        result = await raw(client.session, "tasks/result", {"taskId": task_id})
    assert result["content"][0]["text"] == "deploy done (run 1)" and bench.upstream.ran("deploy") == 1


async def test_legacy_a_client_that_declared_tasks_sees_every_tool_as_task_capable(bench: Any) -> None:
    gw = await bench.start(HELD)
    async with httpx2.AsyncClient(base_url=gw.url, headers={**MCP_HEADERS, **auth_header("alice")},
                                  timeout=httpx2.Timeout(30)) as http:
        listed = {}
        for capabilities in ({"tasks": {}}, {}):
            hello = json.loads(json.dumps(INITIALIZE))
            hello["params"]["capabilities"] = capabilities
            opened = await http.post("/mcp", json=hello)
            assert message_of(opened)["result"]["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
            session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
            await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            tools = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session)
            found = {t["name"]: t for t in message_of(tools)["result"]["tools"]}
            listed[bool(capabilities)] = found[DEPLOY].get("execution")
    assert listed == {True: {"taskSupport": "optional"}, False: None}


async def test_legacy_cancelling_a_held_task_stops_the_wait_and_is_on_the_record(bench: Any) -> None:
    gw = await bench.start(HELD)
    async with connect(gw, "legacy") as client:
        created = await raw(client.session, "tools/call",
                            {"name": DEPLOY, "arguments": {"service": "mail"}, "task": {}})
        task_id = created["task"]["taskId"]
        approval = await pending_for(bench, gw, "mail")
        assert (await raw(client.session, "tasks/cancel", {"taskId": task_id}))["status"] == "cancelled"
        for _ in range(600):  # up to 30 s on a loaded machine
            events = [e for e in gw.audit_events() if e.get("task") == task_id]
            if events:
                break
            await asyncio.sleep(0.05)
    assert [(e["event"], e["verdict"], e["upstream_outcome"]) for e in events] == [
        ("call.outcome", "cancelled", {"status": "not_called"})]
    assert "did not run" in events[0]["message"]
    assert (await bench.approval(gw, approval["id"]))["state"] == "pending"  # still there for approvers
    assert bench.upstream.ran("deploy") == 0
