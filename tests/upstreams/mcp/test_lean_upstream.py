"""The lean tools/call path to a streamable-HTTP MCP upstream (gateway/upstreams/mcp/lean.py, ``mcp.fast_calls``).

Two gateways in front of one SDK server over streamable HTTP on loopback, one with ``fast_calls: true`` (the
default) and one with ``false`` (every call through the SDK's client), answer the same calls the same way:
results, tool errors, structured content, JSON-RPC errors, an oversized response, a timeout, an upstream
killed and started again. The upstream records each POST (JSON-RPC method, TCP connection, protocol version
header, session id), so the tests see which era the lean calls spoke and that sequential calls reuse one
connection; each upstream counts the calls that took the lean path. Calls whose caller could be sent more
than the result (a progress token, a log level, a client that declared elicitation) take the SDK's path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import mcp_types as types
import pytest
import pytest_asyncio
from asgi_support import read_request
from loopback import serve_app
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.streamable_http import EventMessage, EventStore
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.upstreams.mcp import McpUpstream

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

OPEN = "policy: p\nrules: []\n"
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
LIMIT = 20_000  # limits.max_response_bytes of both gateways
ERAS = [("auto", HANDSHAKE), ("newest", MODERN)]


@dataclass
class Seen:
    """One (method, client port, MCP-Protocol-Version, session id) per JSON-RPC POST the upstream got."""

    posts: list[tuple[str, int, str | None, str | None]] = field(default_factory=list)
    ids: list[Any] = field(default_factory=list)  # the JSON-RPC id of each tools/call
    routing: list[dict[str, str]] = field(default_factory=list)  # each tools/call's Mcp-* routing headers
    traces: list[str | None] = field(default_factory=list)  # each tools/call's _meta.traceparent

    def calls(self) -> list[tuple[str, int, str | None, str | None]]:
        return [p for p in self.posts if p[0] == "tools/call"]


class _Recorder:
    def __init__(self, app: ASGIApp, seen: Seen) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            if scope["type"] == "http" and scope["method"] == "GET":
                resumed = dict(scope["headers"]).get(b"last-event-id")
                self.seen.posts.append(("GET", scope["client"][1], None, resumed.decode() if resumed else None))
            await self.app(scope, receive, send)
            return
        body, receive = await read_request(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        message = json.loads(body)
        if message.get("method") == "tools/call":
            self.seen.ids.append(message.get("id"))
            self.seen.traces.append(((message.get("params") or {}).get("_meta") or {}).get("traceparent"))
            self.seen.routing.append({k: v for k, v in headers.items()
                                      if k.startswith("mcp-") and k != "mcp-session-id"})
        self.seen.posts.append((message.get("method", ""), scope["client"][1],
                                headers.get("mcp-protocol-version"), headers.get("mcp-session-id")))
        await self.app(scope, receive, send)


class Weather(BaseModel):
    city: str
    celsius: float


class Reply(BaseModel):
    text: str


def _question(who: str) -> Elicit[Reply]:
    return Elicit(f"a question for {who}", Reply)


def _server() -> MCPServer:
    server = MCPServer("lean-upstream", version="0.1.0")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    @server.tool()
    def routed(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        """An argument a 2026-07-28 client mirrors into an Mcp-Param-Region header."""
        return f"routed to {region}"

    @server.tool()
    def boom() -> str:
        """A tool error (isError)."""
        raise ValueError("it went boom")

    @server.tool()
    def weather(city: str) -> Weather:
        """Structured content with an output schema."""
        return Weather(city=city, celsius=21.5)

    @server.tool()
    def refuse() -> str:
        """A JSON-RPC error."""
        raise MCPError(types.INVALID_PARAMS, "refused on purpose")

    @server.tool()
    def big(size: int) -> str:
        """A response of about ``size`` bytes."""
        return "x" * size

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after ``seconds``."""
        await asyncio.sleep(seconds)
        return "slept"

    arrived: collections.Counter[str] = collections.Counter()

    @server.tool()
    async def together(key: str, count: int) -> str:
        """Answers "together" once ``count`` calls with this ``key`` have arrived, "alone" if they did not within
        20 s: calls shown to run at once by a count, not a clock."""
        arrived[key] += 1
        try:
            async with asyncio.timeout(20):
                while arrived[key] < count:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            return "alone"
        return "together"

    @server.tool()
    async def chatter(ctx: Context) -> str:
        """Logs a warning, reports progress, then answers."""
        with warnings.catch_warnings():  # the logging capability is deprecated at 2026-07-28, current before
            warnings.simplefilter("ignore")
            await ctx.log("warning", "a warning from the upstream")
        await ctx.report_progress(1, 2, "half way")
        return "chattered"

    @server.tool()
    async def ask_on_session(who: str, ctx: Context) -> str:
        """The handshake era's question: elicitation/create on the call's own stream."""
        try:
            answer = await ctx.elicit(f"a question for {who}", Reply)
        except Exception as exc:
            return f"could not ask: {exc}"
        return f"{who} heard: {answer.data.text}" if answer.action == "accept" else f"{who}: {answer.action}"

    @server.tool()
    async def ask(who: str, reply: Annotated[Reply, Resolve(_question)]) -> str:
        """The 2026-07-28 era's question: an InputRequiredResult round."""
        return f"{who} heard: {reply.text}"

    return server


class _Events(EventStore):
    """Every event kept in memory, replayed after the one a client names (resumable event streams)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []  # (event id, stream id, message)

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        ids = [event_id for event_id, _, _ in self.events]
        if last_event_id not in ids:
            return None
        stream_id = self.events[ids.index(last_event_id)][1]
        for event_id, sid, message in self.events[ids.index(last_event_id) + 1:]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def _polling_server() -> MCPServer:
    server = MCPServer("polling-upstream", version="0.1.0")

    @server.tool()
    async def poll(ctx: Context) -> str:
        """Closes its event stream at once and answers later: the client resumes the stream to get it."""
        await ctx.close_sse_stream()
        await asyncio.sleep(0.3)
        return "polled"

    return server


@contextlib.asynccontextmanager
async def _serving(seen: Seen, port: int = 0) -> AsyncIterator[str]:
    async with serve_app(_Recorder(_server().streamable_http_app(), seen), port=port) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="session")
async def upstream() -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()
    async with _serving(seen) as url:
        yield f"{url}/mcp", seen


def _upstream(gateway: Any) -> McpUpstream:
    found = [u for u in gateway.gateway.registry.upstreams if u.name == "m"]
    assert found and isinstance(found[0], McpUpstream)
    return found[0]


def _config(configs: Any, url: str, protocol: str, fast: bool) -> Any:
    return configs.base({"name": "m", "mcp": {"url": url, "protocol": protocol, "fast_calls": fast}},
                        limits={"call_timeout": 1, "max_response_bytes": LIMIT})


async def _pair(start_gateway: Any, configs: Any, url: str, protocol: str) -> tuple[Any, Any]:
    fast = await start_gateway(_config(configs, url, protocol, True), {"p.yaml": OPEN})
    plain = await start_gateway(_config(configs, url, protocol, False), {"p.yaml": OPEN})
    return fast, plain


def _answer(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"meta"})


CASES: list[tuple[str, dict[str, Any]]] = [
    ("m_echo", {"text": "hello"}),
    ("m_boom", {}),
    ("m_weather", {"city": "Oslo"}),
    ("m_refuse", {}),
    ("m_big", {"size": 100}),
    ("m_big", {"size": LIMIT + 100}),  # over the response cap
    ("m_slow", {"seconds": 3}),  # over the 1 s call timeout
    ("m_ask_on_session", {"who": "ann"}),  # asks a client that declared no elicitation: refused
    ("m_ask", {"who": "bo"}),  # the same at 2026-07-28 as an InputRequiredResult round
    ("m_echo", {"text": "after all that"}),
]


# Arguments only a caller inside the gateway can pass (a client's JSON cannot carry NaN): sent as the SDK sends them.
ODD = ("m_echo", {"text": "odd", "n": float("nan"), "big": 10**30, "ü": "é"})


async def _answers(connect_mcp: Any, gateway: Any, mode: str) -> list[Any]:
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        out = []
        for tool, arguments in CASES:
            try:
                out.append(_answer(await conn.call(tool, arguments)))
            except MCPError as exc:
                out.append({"code": exc.code, "message": exc.message})
        return out


@pytest.mark.parametrize(("protocol", "era"), ERAS)
@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_fast_calls_on_and_off_give_the_same_answers(protocol: str, era: str, mode: str,
                                                           upstream: tuple[str, Seen], start_gateway: Any,
                                                           configs: Any, connect_mcp: Any) -> None:
    url, _ = upstream
    fast, plain = await _pair(start_gateway, configs, url, protocol)
    assert _upstream(fast).protocol_version == _upstream(plain).protocol_version == era

    fast_answers = await _answers(connect_mcp, fast, mode)
    plain_answers = await _answers(connect_mcp, plain, mode)

    assert fast_answers == plain_answers
    assert _upstream(plain).lean is None  # switched off: no lean path at all
    assert _upstream(fast).lean_calls == len(CASES)  # every one of them sent on the lean path
    assert _upstream(plain).lean_calls == 0
    echo, boom, weather, refuse, small, large, slow, asked, asked_again, last = fast_answers
    assert echo["content"][0]["text"] == "hello" and not echo.get("isError")
    assert boom["isError"] and "boom" in boom["content"][0]["text"]
    assert weather["structuredContent"] == {"city": "Oslo", "celsius": 21.5}
    assert refuse["isError"] and small["content"][0]["text"] == "x" * 100  # the error's text is the gateway's
    assert large["isError"] and slow["isError"]  # (the upstream's reasons: test_the_upstreams_errors_are_...)
    if era == HANDSHAKE:
        assert "refused by the gateway" in asked["content"][0]["text"]
    assert asked_again["isError"]
    assert last["content"][0]["text"] == "after all that"


async def _outcomes(url: str, protocol: str, fast: bool) -> list[Any]:
    """Each case called on an ``McpUpstream`` of its own (no caller: nothing to relay), the result or the
    error's class and message."""
    up = McpUpstream("m", url=url, protocol=protocol, max_response_bytes=LIMIT, fast_calls=fast)
    await up.start()
    out: list[Any] = []
    try:
        for tool, arguments in [*CASES, ODD]:
            try:
                result = await up.call(tool.removeprefix("m_"), arguments, timeout=1)
                out.append((result.content, result.structured, result.is_error))
            except Exception as exc:  # the size a body declares includes the request's id, which differs per call
                out.append((type(exc).__name__, re.sub(r"\d+ bytes declared", "N bytes declared", str(exc))))
    finally:
        await up.close()
    assert up.lean_calls == (len(CASES) + 1 if fast else 0)
    return out


@pytest.mark.parametrize(("protocol", "era"), ERAS)
async def test_the_upstreams_errors_are_the_same_on_both_paths(protocol: str, era: str,
                                                               upstream: tuple[str, Seen]) -> None:
    url, seen = upstream

    def cancels() -> int:
        return [method for method, *_ in seen.posts].count("notifications/cancelled")

    fast = await _outcomes(url, protocol, True)
    fast_cancels = cancels()
    plain = await _outcomes(url, protocol, False)
    assert fast == plain
    # the timed-out call is cancelled at the upstream alike: in the handshake era a notifications/cancelled,
    # at 2026-07-28 the POST closed
    assert fast_cancels == cancels() - fast_cancels == (1 if era == HANDSHAKE else 0)
    refuse, large, slow = fast[3], fast[5], fast[6]
    assert "elicitation/create refused by the gateway" in str(fast[8])  # the question, refused as ever
    assert fast[-1][0] == [{"type": "text", "text": "odd"}]
    assert refuse == ("UpstreamError", f"m: refuse: MCP error {types.INVALID_PARAMS}: refused on purpose")
    assert large[0] == "UpstreamError" and str(LIMIT) in large[1]  # an event or a body over the cap
    assert slow == ("UpstreamError", "m: slow timed out after 1s")


@pytest.mark.parametrize(("protocol", "era"), ERAS)
async def test_lean_calls_speak_the_sessions_era_on_one_kept_alive_connection(
        protocol: str, era: str, upstream: tuple[str, Seen], start_gateway: Any, configs: Any,
        connect_mcp: Any) -> None:
    url, seen = upstream
    gateway = await start_gateway(_config(configs, url, protocol, True), {"p.yaml": OPEN})
    up = _upstream(gateway)
    async with connect_mcp(gateway, "alice", mode=MODERN) as conn:
        assert (await conn.call("m_echo", {"text": "warm"})).content[0].text == "warm"
        before, taken = len(seen.posts), up.lean_calls
        for i in range(20):
            assert (await conn.call("m_echo", {"text": str(i)})).content[0].text == str(i)

    assert up.lean_calls - taken == 20
    calls = seen.calls()[-20:]
    assert len(seen.posts) - before == 20  # nothing but the calls: no re-listing, no extra requests
    assert all(str(i).startswith("gateway-") for i in seen.ids[-20:])  # sent by upstreams/mcp/lean.py, not the SDK
    assert {version for _, _, version, _ in calls} == {era}
    assert len({port for _, port, _, _ in calls}) == 1, "sequential lean calls should share one connection"
    sessions = {session for _, _, _, session in calls}
    if era == HANDSHAKE:
        assert len(sessions) == 1 and None not in sessions  # the open session's id
    else:
        assert sessions == {None}


async def test_a_2026_lean_call_carries_the_routing_headers_the_sdk_would(upstream: tuple[str, Seen],
                                                                         start_gateway: Any, configs: Any,
                                                                         connect_mcp: Any) -> None:
    url, seen = upstream
    gateway = await start_gateway(_config(configs, url, "newest", True), {"p.yaml": OPEN})
    up = _upstream(gateway)
    async with connect_mcp(gateway, "alice", mode="legacy") as conn:
        calls, taken = len(seen.calls()), up.lean_calls
        assert (await conn.call("m_routed", {"region": "eu-west"})).content[0].text == "routed to eu-west"
    assert up.lean_calls == taken + 1 and len(seen.calls()) == calls + 1  # one POST, accepted at once
    assert str(seen.ids[-1]).startswith("gateway-")
    assert seen.routing[-1] == {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "routed",
                                "mcp-param-region": "eu-west"}


async def _sdk_path_taken(gateway: Any, call: Callable[[], Awaitable[Any]]) -> Any:
    return await _answer_of(gateway, call, lean=False)


@pytest.mark.parametrize(("protocol", "era"), ERAS)
async def test_a_progress_token_or_a_log_level_takes_the_sdk_path(protocol: str, era: str,
                                                                   upstream: tuple[str, Seen],
                                                                   start_gateway: Any, configs: Any,
                                                                   connect_mcp: Any) -> None:
    url, _ = upstream
    gateway = await start_gateway(_config(configs, url, protocol, True), {"p.yaml": OPEN})
    progress: list[float] = []
    logs: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))

    async with connect_mcp(gateway, "alice", mode=MODERN, logging_callback=on_log) as conn:
        quiet = await _answer_of(gateway, lambda: conn.client.call_tool("m_chatter", {}), lean=True)
        assert quiet.content[0].text == "chattered" and progress == [] and logs == []
        told = await _sdk_path_taken(gateway, lambda: conn.client.call_tool("m_chatter", {},
                                                                           progress_callback=on_progress))
        assert told.content[0].text == "chattered" and progress == [1]
    async with connect_mcp(gateway, "alice", mode=MODERN, logging_callback=on_log, log_level="warning") as conn:
        logged = await _sdk_path_taken(gateway, lambda: conn.client.call_tool("m_chatter", {}))
        assert logged.content[0].text == "chattered"
        for _ in range(1000):  # up to 20 s on a loaded machine
            if logs:
                break
            await asyncio.sleep(0.02)
        assert logs == ["a warning from the upstream"]


async def _answer_of(gateway: Any, call: Callable[[], Awaitable[Any]], lean: bool) -> Any:
    up = _upstream(gateway)
    assert up.lean is not None
    taken = up.lean_calls
    result = await call()
    assert up.lean_calls == taken + (1 if lean else 0), "the lean path" if lean else "the SDK's path"
    return result


@pytest.mark.parametrize(("protocol", "era", "tool"), [("auto", HANDSHAKE, "m_ask_on_session"),
                                                       ("newest", MODERN, "m_ask")])
@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_client_that_can_answer_questions_takes_the_sdk_path_and_is_asked(
        protocol: str, era: str, tool: str, mode: str, upstream: tuple[str, Seen], start_gateway: Any,
        configs: Any, connect_mcp: Any) -> None:
    url, _ = upstream
    gateway = await start_gateway(_config(configs, url, protocol, True), {"p.yaml": OPEN})

    async def answers(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"text": "yes"})

    async with connect_mcp(gateway, "alice", mode=mode, elicitation_callback=answers) as conn:
        result = await _sdk_path_taken(gateway, lambda: conn.call(tool, {"who": "ann"}))
    assert result.content[0].text == "ann heard: yes"


@pytest.mark.parametrize(("protocol", "era"), ERAS)
async def test_an_upstream_killed_and_started_again_is_answered_alike_and_reconnected(
        protocol: str, era: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    seen = Seen()
    answers: dict[str, list[Any]] = {"fast": [], "plain": []}
    async with contextlib.AsyncExitStack() as stack:
        async with _serving(seen) as url:
            port = int(url.rsplit(":", 1)[1])
            fast, plain = await _pair(start_gateway, configs, f"{url}/mcp", protocol)
            conns = {"fast": await stack.enter_async_context(connect_mcp(fast, "alice")),
                     "plain": await stack.enter_async_context(connect_mcp(plain, "alice"))}
            for name, conn in conns.items():
                answers[name].append(_answer(await conn.call("m_echo", {"text": "here"})))
        # the upstream is gone: both gateways answer alike, and neither hangs
        for name, conn in conns.items():
            answers[name].append(_answer(await conn.call("m_echo", {"text": "anyone?"})))
        async with _serving(seen, port=port):  # back on the same port: the next calls reconnect
            for name, conn in conns.items():
                for _ in range(3):
                    answers[name].append(_answer(await conn.call("m_echo", {"text": "back"})))
    assert answers["fast"] == answers["plain"]
    assert answers["fast"][0]["content"][0]["text"] == "here"
    assert answers["fast"][1]["isError"]
    assert answers["fast"][-1]["content"][0]["text"] == "back" and not answers["fast"][-1].get("isError")
    assert _upstream(fast).lean_calls >= 2 and _upstream(plain).lean_calls == 0


async def test_an_event_stream_the_upstream_closes_early_is_resumed_alike() -> None:
    seen = Seen()
    app = _polling_server().streamable_http_app(event_store=_Events(), retry_interval=100)
    async with serve_app(_Recorder(app, seen)) as url:
        outcomes = []
        for fast in (True, False):
            up = McpUpstream("m", url=f"{url}/mcp", fast_calls=fast)
            await up.start()
            try:
                before = len(seen.posts)
                result = await up.call("poll", {}, timeout=10)
                outcomes.append((result.content, result.is_error))
                resumed = [session for method, _, _, session in seen.posts[before:] if method == "GET" and session]
                assert resumed, "the stream was resumed from its last event"
                assert up.lean_calls == (1 if fast else 0)
            finally:
                await up.close()
    assert outcomes[0] == outcomes[1] == ([{"type": "text", "text": "polled"}], False)


@pytest.mark.parametrize(("protocol", "era"), ERAS)
async def test_lean_calls_run_concurrently(protocol: str, era: str, upstream: tuple[str, Seen]) -> None:
    url, _ = upstream
    up = McpUpstream("m", url=url, protocol=protocol)
    await up.start()
    try:  # each call answers only once all four are under way at the upstream
        args = {"key": uuid.uuid4().hex, "count": 4}
        results = await asyncio.gather(*(up.call("together", args, timeout=30) for _ in range(4)))
    finally:
        await up.close()
    assert [r.content[0]["text"] for r in results] == ["together"] * 4 and up.lean_calls == 4


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(("protocol", "era"), ERAS)
async def test_the_callers_trace_context_reaches_the_upstream_on_both_paths(
        protocol: str, era: str, upstream: tuple[str, Seen], start_gateway: Any, configs: Any,
        connect_mcp: Any) -> None:
    url, seen = upstream
    fast, plain = await _pair(start_gateway, configs, url, protocol)
    for gateway in (fast, plain):
        async with connect_mcp(gateway, "alice") as conn:
            before = _upstream(gateway).lean_calls
            result = await conn.client.call_tool("m_echo", {"text": "traced"},
                                                 meta={"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"})
            up_calls = _upstream(gateway).lean_calls
        assert result.content[0].text == "traced"
        assert up_calls == before + (1 if gateway is fast else 0)
        traceparent = seen.traces[-1]
        assert traceparent is not None and traceparent.split("-")[1] == TRACE_ID, traceparent


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_kind_the_upstream_may_not_send_leaves_the_call_lean_and_answered_alike(
        mode: str, upstream: tuple[str, Seen], start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    url, _ = upstream
    answers = []
    for fast in (True, False):
        config = configs.base({"name": "m", "mcp": {"url": url, "fast_calls": fast,
                                                    "client_requests": {"elicitation": "deny"}}})
        gateway = await start_gateway(config, {"p.yaml": OPEN})

        async def answers_yes(ctx: Any, params: Any) -> types.ElicitResult:
            return types.ElicitResult(action="accept", content={"text": "yes"})

        async with connect_mcp(gateway, "alice", mode=mode, elicitation_callback=answers_yes) as conn:
            result = await _answer_of(gateway, lambda c=conn: c.call("m_ask_on_session", {"who": "cy"}), lean=fast) \
                if fast else await conn.call("m_ask_on_session", {"who": "cy"})
        answers.append(_answer(result))
    # the client could answer, but the upstream may not ask it: refused as the SDK's client refuses it
    assert answers[0] == answers[1]
    assert answers[0]["content"][0]["text"] == "could not ask: Elicitation not supported"
