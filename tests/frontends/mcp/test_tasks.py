"""MCP tasks through the gateway (docs/gateway.md "Tasks"), with real clients and real upstreams.

- A task-only upstream tool (server-everything's ``simulate-research-query``, ``execution.taskSupport:
  required``) works for a client that knows nothing of tasks: the gateway drives the upstream task itself.
- A task-aware client gets the gateway's own task: in the 2025-11-25 era by asking (``params.task``), then
  ``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel``; in the 2026-07-28 era through the tasks
  extension (an SDK ``ClientExtension`` claiming ``resultType: "task"``, which polls ``tasks/get``).
- Policies decide when the task is created; tasks are bound to the principal that created them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from gateway_harness import RunningGateway, base_config, mcp_upstream, run_gateway, write_gateway
from tasks_support import EXTENSION, NOT_FOUND, TasksClient, raw, refused

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

TOOL = "ev_simulate-research-query"

POLICY = """
    policy: tasks
    rules:
      - id: no-forbidden-topics
        tools: [ev_simulate-research-query]
        when: args.topic == "forbidden"
        action: reject
        message: not that topic
"""


async def everything(start_gateway: Any, configs: Any) -> Any:
    return await start_gateway(configs.base(configs.everything_upstream("ev")), {"p.yaml": POLICY})


# --- a task-only tool, for every client ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_task_only_tool_works_for_a_client_that_knows_nothing_of_tasks(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, mode=mode) as conn:
        listed = {t.name: t for t in (await conn.client.list_tools()).tools}
        result = await conn.client.call_tool(TOOL, {"topic": "tides"})
    if mode == "legacy":  # the gateway takes the call with or without a task
        assert listed[TOOL].execution == types.ToolExecution(task_support="optional")
    assert not result.is_error, result
    assert "Research Report: tides" in result.content[0].text  # type: ignore[union-attr]


# --- 2025-11-25: the client asks for a task --------------------------------------------------------------------


async def test_legacy_task_create_poll_result_list_and_the_id_is_the_gateways(
        start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, mode="legacy") as conn:
        init = conn.client.server_capabilities
        assert init.tasks is not None and init.tasks.requests is not None and init.tasks.requests.tools is not None
        session = conn.client.session
        created = await raw(session, "tools/call", {"name": TOOL, "arguments": {"topic": "tides"},
                                                    "task": {"ttl": 60_000}})
        task = created["task"]
        assert task["status"] == "working" and task["ttl"] == 60_000 and task["pollInterval"] > 0
        assert len(task["taskId"]) >= 32  # unguessable, and minted by the gateway
        got = await raw(session, "tasks/get", {"taskId": task["taskId"]})
        assert got["taskId"] == task["taskId"] and got["status"] == "working"
        listed = await raw(session, "tasks/list", {})
        assert [t["taskId"] for t in listed["tasks"]] == [task["taskId"]]
        result = await raw(session, "tasks/result", {"taskId": task["taskId"]})  # held until the end
        assert "Research Report: tides" in result["content"][0]["text"]
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
        assert (await raw(session, "tasks/get", {"taskId": task["taskId"]}))["status"] == "completed"
    event = gateway.audit_event(task["taskId"])  # the call's outcome, under the task's id
    assert event["verdict"] == "allow" and event["upstream_outcome"]["status"] == "ok"
    assert event["task"] == task["taskId"]


async def test_legacy_a_task_whose_client_named_its_call_is_audited_under_both(
        start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, mode="legacy") as conn:
        created = await raw(conn.client.session, "tools/call",
                            {"name": "ev_get-sum", "arguments": {"a": 1, "b": 2}, "task": {},
                             "_meta": {"gateway/call_id": "my-call-7"}})
        result = await raw(conn.client.session, "tasks/result", {"taskId": created["task"]["taskId"]})
    assert result["_meta"]["gateway/call_id"] == "my-call-7"
    events = [e for e in gateway.audit_events() if e.get("call_id") == "my-call-7"]
    assert [e["event"] for e in events] == ["call.intent", "call.outcome"]
    assert {e["task"] for e in events} == {created["task"]["taskId"]}


async def test_legacy_the_policy_decides_when_the_task_is_created(start_gateway: Any, configs: Any,
                                                                 connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, mode="legacy") as conn:
        session = conn.client.session
        created = await raw(session, "tools/call", {"name": TOOL, "arguments": {"topic": "forbidden"},
                                                    "task": {}})
        result = await raw(session, "tasks/result", {"taskId": created["task"]["taskId"]})
        got = await raw(session, "tasks/get", {"taskId": created["task"]["taskId"]})
    assert result["isError"] is True and "not that topic" in result["content"][0]["text"]
    assert got["status"] == "failed"  # 2025-11-25: a result with isError fails the task
    event = gateway.audit_event(created["task"]["taskId"])
    assert event["verdict"] == "reject" and event["upstream_outcome"] == {"status": "not_called"}


async def test_legacy_cancel_ends_the_task_and_the_call_is_audited_as_cancelled(
        start_gateway: Any, configs: Any, connect_mcp: Any, until: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, mode="legacy") as conn:
        session = conn.client.session
        created = await raw(session, "tools/call", {"name": TOOL, "arguments": {"topic": "tides"}, "task": {}})
        task_id = created["task"]["taskId"]
        await asyncio.sleep(0.5)  # the upstream task is under way
        cancelled = await raw(session, "tasks/cancel", {"taskId": task_id})
        assert cancelled["status"] == "cancelled"
        assert (await raw(session, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"
        again = await refused(session, "tasks/cancel", {"taskId": task_id})
        assert again.code == types.INVALID_PARAMS  # already terminal
        ended = await refused(session, "tasks/result", {"taskId": task_id})
        assert "cancelled" in str(ended)
    event = await until(lambda: _outcome(gateway, task_id))
    assert event["verdict"] == "cancelled" and event["upstream_outcome"]["status"] == "cancelled"


async def _outcome(gateway: Any, call_id: str) -> Any:
    found = [e for e in gateway.audit_events() if e["event"] == "call.outcome" and e["call_id"] == call_id]
    return found[0] if found else None


# --- the binding to the principal ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_another_principal_gets_the_answer_for_an_unknown_task(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, "alice", mode="legacy") as alice:
        created = await raw(alice.client.session, "tools/call",
                            {"name": TOOL, "arguments": {"topic": "secrets"}, "task": {}})
        task_id = created["task"]["taskId"]
        options = {"extensions": [TasksClient()]} if mode != "legacy" else {}
        async with connect_mcp(gateway, "bob", mode=mode, **options) as bob:
            methods = ["tasks/get", "tasks/cancel"] + (["tasks/result", "tasks/list"] if mode == "legacy"
                                                       else ["tasks/update"])
            for method in [m for m in methods if m != "tasks/list"]:
                stolen = await refused(bob.client.session, method, {"taskId": task_id})
                unknown = await refused(bob.client.session, method, {"taskId": task_id[:-4] + "AAAA"})
                assert (stolen.code, str(stolen)) == (unknown.code, str(unknown)) == (types.INVALID_PARAMS,
                                                                                      NOT_FOUND), method
            if mode == "legacy":
                assert (await raw(bob.client.session, "tasks/list", {}))["tasks"] == []
        # bob's attempts changed nothing: alice's task runs on and ends with her result
        result = await raw(alice.client.session, "tasks/result", {"taskId": task_id})
    assert "Research Report: secrets" in result["content"][0]["text"]


# --- 2026-07-28: the tasks extension --------------------------------------------------------------------------


async def test_modern_a_task_aware_client_gets_a_task_and_polls_it(start_gateway: Any, configs: Any,
                                                                  connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    tasks = TasksClient()
    async with connect_mcp(gateway, mode="2026-07-28", extensions=[tasks]) as conn:
        discovered = await raw(conn.client.session, "server/discover", {})
        assert discovered["capabilities"]["extensions"][EXTENSION] == {}
        result = await conn.client.call_tool(TOOL, {"topic": "tides"})
        gone = await refused(conn.client.session, "tasks/result", {"taskId": tasks.created[0]})
    assert gone.code == types.METHOD_NOT_FOUND  # removed by the extension: the result is inline in tasks/get
    assert not result.is_error and "Research Report: tides" in result.content[0].text  # type: ignore[union-attr]
    assert len(tasks.created) == 1 and "working" in tasks.seen and tasks.seen[-1] == "completed"
    assert gateway.audit_event(tasks.created[0])["upstream_outcome"]["status"] == "ok"


async def test_modern_a_quick_outcome_is_a_plain_result_and_a_refusal_creates_no_task(
        start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    tasks = TasksClient()
    async with connect_mcp(gateway, mode="2026-07-28", extensions=[tasks]) as conn:
        refusal = await conn.client.call_tool(TOOL, {"topic": "forbidden"})
        quick = await conn.client.call_tool("ev_get-sum", {"a": 2, "b": 40})
    assert refusal.is_error and "not that topic" in refusal.content[0].text  # type: ignore[union-attr]
    assert "42" in quick.content[0].text  # type: ignore[union-attr]
    assert tasks.created == []


async def test_modern_tasks_methods_need_the_extension(start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await everything(start_gateway, configs)
    async with connect_mcp(gateway, mode="2026-07-28") as conn:
        error = await refused(conn.client.session, "tasks/get", {"taskId": "x"})
    assert error.code == -32021
    assert error.error.data == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


# --- our own stdio test server's task-only tool (research) -----------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def ours(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningGateway]:
    """One open gateway on our stdio server for the module (each start launches it: seconds of CPU); each test
    names its own marker file and reads only its own task's events."""
    root = tmp_path_factory.mktemp("our-tasks")
    async with run_gateway(write_gateway(root, base_config(mcp_upstream("up")),
                                         {"p.yaml": "policy: open\nrules: []\n"})) as running:
        yield running


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_our_task_only_tool_for_plain_and_task_aware_clients(mode: str, ours: RunningGateway, connect_mcp: Any,
                                                                  tmp_path: Any) -> None:
    gateway = ours
    marker = tmp_path / "research"
    args = {"topic": "eels", "seconds": 1.5, "marker": str(marker)}
    async with connect_mcp(gateway, mode=mode) as plain:
        result = await plain.client.call_tool("up_research", args)
    assert not result.is_error and marker.read_text() == "done"
    assert result.content[0].text == "report on eels"  # type: ignore[union-attr]
    if mode == "legacy":
        async with connect_mcp(gateway, mode=mode) as aware:
            created = await raw(aware.client.session, "tools/call",
                                {"name": "up_research", "arguments": args, "task": {}})
            done = await raw(aware.client.session, "tasks/result", {"taskId": created["task"]["taskId"]})
    else:
        tasks = TasksClient()
        async with connect_mcp(gateway, mode=mode, extensions=[tasks]) as aware:
            done = (await aware.client.call_tool("up_research", args)).model_dump(by_alias=True)
        assert len(tasks.created) == 1
    assert done["content"][0]["text"] == "report on eels"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_cancelling_the_gateway_task_cancels_the_upstream_task(mode: str, ours: RunningGateway, connect_mcp: Any,
                                                                    tmp_path: Any, until: Any) -> None:
    gateway = ours
    marker = tmp_path / "research"
    args = {"topic": "eels", "seconds": 30, "marker": str(marker)}
    options = {"extensions": [TasksClient()]} if mode != "legacy" else {}
    async with connect_mcp(gateway, mode=mode, **options) as conn:
        session = conn.client.session
        if mode == "legacy":
            created = (await raw(session, "tools/call", {"name": "up_research", "arguments": args, "task": {}}))["task"]
        else:
            created = await raw(session, "tools/call", {"name": "up_research", "arguments": args})
            assert created["resultType"] == "task"
        task_id = created["taskId"]

        async def started() -> bool:
            return marker.exists() and marker.read_text() == "started"

        await until(started)
        ack = await raw(session, "tasks/cancel", {"taskId": task_id})
        if mode == "legacy":
            assert ack["status"] == "cancelled"
        else:  # an acknowledgement only
            assert ack["resultType"] == "complete" and set(ack) <= {"resultType", "_meta"}, ack
        assert (await raw(session, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"

        async def upstream_cancelled() -> bool:
            return marker.read_text() == "cancelled"

        await until(upstream_cancelled)
    event = await until(lambda: _outcome(gateway, task_id))
    assert event["verdict"] == "cancelled"


async def test_a_task_may_run_longer_than_the_call_timeout(start_gateway: Any, configs: Any, connect_mcp: Any,
                                                           tmp_path: Any) -> None:
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up"), limits={"call_timeout": "1s",
                                                                                   "task_timeout": "20s"}),
                                  {"p.yaml": "policy: open\nrules: []\n"})
    args = {"topic": "eels", "seconds": 2, "marker": str(tmp_path / "m")}
    async with connect_mcp(gateway, mode="legacy") as conn:
        plain = await conn.client.call_tool("up_research", args)  # a call the client waits on: 1 s
        created = await raw(conn.client.session, "tools/call", {"name": "up_research", "arguments": args,
                                                                "task": {}})
        done = await raw(conn.client.session, "tasks/result", {"taskId": created["task"]["taskId"]})
    assert plain.is_error and "The tool failed" in plain.content[0].text  # type: ignore[union-attr]
    assert done["content"][0]["text"] == "report on eels"


async def test_modern_a_client_that_declared_tasks_still_gets_a_quick_calls_progress(
        ours: RunningGateway, connect_mcp: Any) -> None:
    gateway = ours
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with connect_mcp(gateway, mode="2026-07-28", extensions=[TasksClient()]) as conn:
        result = await conn.client.call_tool("up_steps", {"count": 3}, progress_callback=progress)
    assert result.content[0].text == "done in 3 steps"  # type: ignore[union-attr]
    assert seen == [1, 2, 3]


async def test_an_upstream_answering_in_the_extensions_shape_is_polled(ours: RunningGateway, connect_mcp: Any,
                                                                       tmp_path: Any) -> None:
    gateway = ours
    args = {"topic": "eels", "seconds": 1, "marker": str(tmp_path / "m"), "extension_shape": True}
    async with connect_mcp(gateway, mode="legacy") as conn:
        result = await conn.client.call_tool("up_research", args)
    assert not result.is_error and result.content[0].text == "report on eels"  # type: ignore[union-attr]


async def test_tasks_on_two_upstreams_at_once_each_get_their_own_result(start_gateway: Any, configs: Any,
                                                                        connect_mcp: Any, tmp_path: Any) -> None:
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev"), configs.mcp_upstream("up")),
                                  {"p.yaml": POLICY})
    async with connect_mcp(gateway, mode="legacy") as conn:
        session = conn.client.session
        created = [(await raw(session, "tools/call", {"name": name, "arguments": args, "task": {}}))["task"]["taskId"]
                   for name, args in ((TOOL, {"topic": "owls"}),
                                      ("up_research", {"topic": "eels", "marker": str(tmp_path / "m")}))]
        results = await asyncio.gather(*(raw(session, "tasks/result", {"taskId": t}) for t in created))
        listed = await raw(session, "tasks/list", {})
    assert len(set(created)) == 2 and {t["taskId"] for t in listed["tasks"]} == set(created)
    assert "Research Report: owls" in results[0]["content"][0]["text"]
    assert results[1]["content"][0]["text"] == "report on eels"
    assert {gateway.audit_event(t)["upstream"] for t in created} == {"ev", "up"}
