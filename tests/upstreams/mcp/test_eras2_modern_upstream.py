"""What a 2026-07-28 upstream (``mcp.protocol: newest``) gives the gateway's clients.

- Its questions (``InputRequiredResult`` rounds, here an elicitation from a ``Resolve`` tool) reach exactly the
  client of the call that asked, even with several calls in flight on the one connection.
- Its log messages reach a client at the level that client asked for: the gateway sends the caller's level
  upstream with each call (a 2026-07-28 server sends nothing to a request that did not ask).
- Its tasks (the tasks extension, declared in ``server/discover``): the gateway declares the extension back,
  polls a task answer to its result, and lists the tools with ``taskSupport: "optional"`` to handshake clients.

The upstream is the SDK's server over streamable HTTP on loopback, served here, or our stdio test server.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

import mcp_types as types
import pytest
import pytest_asyncio
from loopback import serve_app
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel

from gateway.upstreams.mcp import McpUpstream

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

OPEN = "policy: p\nrules: []\n"
ERAS = ["legacy", "2026-07-28"]


class Reply(BaseModel):
    text: str


def _question(who: str) -> Elicit[Reply]:
    return Elicit(f"a question for {who}", Reply)


class _Tasks:
    """The 2026-07-28 tasks extension, just enough for ``report``: a task answer, then tasks/get with the result."""

    def __init__(self, server: MCPServer) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        low = server._lowlevel_server
        low.extensions["io.modelcontextprotocol/tasks"] = {}
        low.middleware.append(self.middleware)
        low.add_request_handler("tasks/get", _TaskId, self.get)

    async def middleware(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params or {}
        if ctx.method != "tools/call" or params.get("name") != "report":
            return await call_next(ctx)
        declared = (params.get("_meta") or {}).get("io.modelcontextprotocol/clientCapabilities", {})
        if "io.modelcontextprotocol/tasks" not in (declared.get("extensions") or {}):
            raise MCPError(code=-32021, message="report needs the tasks extension")
        now = datetime.now(UTC).isoformat()
        task = {"taskId": secrets.token_hex(8), "status": "working", "createdAt": now, "lastUpdatedAt": now,
                "ttlMs": 60_000, "pollIntervalMs": 50, "polls": 0, "topic": (params.get("arguments") or {})["topic"]}
        self.tasks[task["taskId"]] = task
        return {"resultType": "task", **{k: v for k, v in task.items() if k not in ("polls", "topic")}}

    async def get(self, ctx: Any, params: _TaskId) -> dict[str, Any]:
        task = self.tasks[params.taskId]
        task["polls"] += 1
        shown = {k: v for k, v in task.items() if k not in ("polls", "topic")}
        if task["polls"] < 3:
            return shown
        text = f"report on {task['topic']}"
        return {**shown, "status": "completed",
                "result": {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}}}


class _TaskId(BaseModel):
    taskId: str  # the wire name


def _server() -> MCPServer:
    server = MCPServer("modern-upstream", version="0.1.0")

    @server.tool()
    async def ask(who: str, reply: Annotated[Reply, Resolve(_question)]) -> str:
        """Ask the client's user a question naming ``who``; say what came back."""
        return f"{who} heard: {reply.text}"

    @server.tool()
    async def ask_on_session(who: str, ctx: Context) -> str:
        """The handshake era's way: a standalone elicitation/create on the call's own stream."""
        answer = await ctx.elicit(f"a question for {who}", Reply)
        return f"{who} heard: {answer.data.text}" if answer.action == "accept" else f"{who}: {answer.action}"

    @server.tool()
    def report(topic: str) -> str:
        """Runs only as a task (the middleware answers)."""
        raise AssertionError("report runs through _Tasks")

    @server.prompt()
    def quiz(ctx: Context) -> Any:
        """Asks its client a question (InputRequiredResult) before it answers."""
        if not ctx.input_responses:
            return types.InputRequiredResult(input_requests={"q": types.ElicitRequest(
                params=types.ElicitRequestFormParams(message="the quiz's question", requested_schema={
                    "type": "object", "properties": {"text": {"type": "string"}}}))})
        return "quizzed"

    _Tasks(server)
    return server


@pytest_asyncio.fixture(loop_scope="session")
async def modern_upstream() -> AsyncIterator[str]:
    async with serve_app(_server().streamable_http_app()) as url:
        yield f"{url}/mcp"


def _upstream(gateway: Any, name: str) -> McpUpstream:
    found = [u for u in gateway.gateway.registry.upstreams if u.name == name]
    assert found and isinstance(found[0], McpUpstream)
    return found[0]


def _answering(who: str, asked: list[str]) -> Any:
    async def elicitation(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        await asyncio.sleep(0.3)  # keep both calls in flight at once
        return types.ElicitResult(action="accept", content={"text": f"{who}'s answer"})

    return elicitation


async def _both_asked_at_once(gateway: Any, mode: str, tool: str, connect_mcp: Any) -> None:
    """alice and bob call ``tool`` at once; each client must get exactly its own call's question."""
    asked: dict[str, list[str]] = {"alice": [], "bob": []}
    async with connect_mcp(gateway, "alice", mode=mode, elicitation_callback=_answering("alice", asked["alice"])) \
            as a, connect_mcp(gateway, "bob", mode=mode, elicitation_callback=_answering("bob", asked["bob"])) as b:
        results = await asyncio.gather(a.client.call_tool(tool, {"who": "alice"}),
                                       b.client.call_tool(tool, {"who": "bob"}))
    texts = [r.content[0].text for r in results]  # type: ignore[union-attr]
    assert texts == ["alice heard: alice's answer", "bob heard: bob's answer"]
    assert asked == {"alice": ["a question for alice"], "bob": ["a question for bob"]}


@pytest.mark.parametrize("mode", ERAS)
async def test_questions_reach_the_client_of_the_call_that_asked_with_calls_in_flight_together(
        mode: str, modern_upstream: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base({"name": "m", "mcp": {"url": modern_upstream, "protocol": "newest"}}),
                                  {"p.yaml": OPEN})
    assert _upstream(gateway, "m").protocol_version == "2026-07-28"
    await _both_asked_at_once(gateway, mode, "m_ask", connect_mcp)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_handshake_upstream_over_http_asks_the_client_of_its_call_with_calls_in_flight_together(
        mode: str, modern_upstream: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    """Over streamable HTTP a request on a call's own response stream is handled in that call's context."""
    gateway = await start_gateway(configs.base({"name": "m", "mcp": {"url": modern_upstream, "protocol": "legacy"}}),
                                  {"p.yaml": OPEN})
    assert _upstream(gateway, "m").protocol_version == "2025-11-25"
    await _both_asked_at_once(gateway, mode, "m_ask_on_session", connect_mcp)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_that_declared_no_elicitation_is_not_asked(
        mode: str, modern_upstream: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base({"name": "m", "mcp": {"url": modern_upstream, "protocol": "newest"}}),
                                  {"p.yaml": OPEN})
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        result = await conn.client.call_tool("m_ask", {"who": "alice"})
    assert result.is_error  # the upstream's call failed on the gateway's refusal; nothing was made up


@pytest.mark.parametrize("mode", ERAS)
async def test_log_messages_of_a_2026_upstream_reach_the_client_at_its_level(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up", protocol="newest")), {"p.yaml": OPEN})
    assert _upstream(gateway, "up").protocol_version == "2026-07-28"
    got: list[str] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        got.append(params.level)

    options: dict[str, Any] = {"logging_callback": on_log}
    if mode != "legacy":
        options["log_level"] = "warning"
    async with connect_mcp(gateway, mode=mode, **options) as conn:
        if mode == "legacy":
            with warnings.catch_warnings():  # logging/setLevel: deprecated at 2026-07-28, current in this era
                warnings.simplefilter("ignore")
                await conn.client.set_logging_level("warning")
        result = await conn.client.call_tool("up_chatter", {})
        for _ in range(1000):  # up to 20 s on a loaded machine
            if len(got) >= 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    assert not result.is_error
    assert got == ["warning", "error"]


@pytest.mark.parametrize("mode", ERAS)
async def test_no_log_level_asked_no_log_messages(mode: str, start_gateway: Any, configs: Any,
                                                  connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up", protocol="newest")), {"p.yaml": OPEN})
    got: list[str] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        got.append(params.level)

    async with connect_mcp(gateway, mode=mode, logging_callback=on_log) as conn:
        result = await conn.client.call_tool("up_chatter", {})
        await asyncio.sleep(0.3)
    assert not result.is_error
    assert got == []


@pytest.mark.parametrize("mode", ERAS)
async def test_a_task_of_a_2026_upstream_is_run_to_its_result(
        mode: str, modern_upstream: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base({"name": "m", "mcp": {"url": modern_upstream, "protocol": "newest"}}),
                                  {"p.yaml": OPEN})
    async with connect_mcp(gateway, mode=mode) as conn:
        listed = {t.name: t for t in (await conn.client.list_tools()).tools}
        result = await conn.client.call_tool("m_report", {"topic": "tides"})
    assert not result.is_error
    assert result.content[0].text == "report on tides"  # type: ignore[union-attr]
    if mode == "legacy":  # the extension, mapped to what a handshake client reads: any call may be a task
        assert listed["m_report"].execution is not None
        assert listed["m_report"].execution.task_support == "optional"


async def test_a_prompts_question_never_goes_to_the_client_of_a_tool_call_in_flight(
        modern_upstream: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    """At 2026-07-28 a question outside a tool call's context is a prompt's or a read's: not relayed to a caller."""
    gateway = await start_gateway(configs.base({"name": "m", "mcp": {"url": modern_upstream, "protocol": "newest"}}),
                                  {"p.yaml": OPEN})
    bob_done = asyncio.Event()
    asked: list[str] = []

    async def alice_answers(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(bob_done.wait(), 10)  # her call stays in flight while bob gets the prompt
        return types.ElicitResult(action="accept", content={"text": "alice's answer"})

    async def bob_gets(conn: Any) -> Any:
        try:
            return await conn.client.get_prompt("m_quiz")
        except Exception as exc:  # refused: the gateway relays the upstream's failure
            return exc
        finally:
            bob_done.set()

    async with connect_mcp(gateway, "alice", elicitation_callback=alice_answers) as alice, \
            connect_mcp(gateway, "bob") as bob:
        call = asyncio.ensure_future(alice.client.call_tool("m_ask", {"who": "alice"}))
        while not asked:
            await asyncio.sleep(0.02)
        await bob_gets(bob)
        result = await call
    assert asked == ["a question for alice"]  # the quiz's question was not put to alice
    assert result.content[0].text == "alice heard: alice's answer"  # type: ignore[union-attr]
