"""The upstream side of the two MCP eras: each MCP upstream is spoken to in the era its config asks
(``auto``: the handshake when offered, else 2026-07-28; ``newest``: 2026-07-28 when offered, else the
handshake; or one pinned), over one connection kept open and reused for every call, and its tool-list
changes reach the gateway's clients in both eras.

Upstreams: our stdio test server (the SDK's server: both eras), server-everything over stdio
(handshake only), and an SDK server over streamable HTTP on loopback, served here, that records
every request it gets (method, TCP connection, session id), optionally refusing the handshake era
as a server that speaks only 2026-07-28 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from asgi_support import read_request
from loopback import serve_app
from mcp.client.subscriptions import ToolsListChanged
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import ConfigError
from gateway.upstreams.mcp import McpUpstream

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
OPEN = "policy: p\nrules: []\n"
CALLS = 12


@dataclass
class Seen:
    """What the HTTP upstream received: one (method, client port, session id) per JSON-RPC POST."""

    posts: list[tuple[str, int, str | None]] = field(default_factory=list)

    def methods(self) -> list[str]:
        return [m for m, _, _ in self.posts]

    def ports(self, method: str | None = None) -> set[int]:
        return {p for m, p, _ in self.posts if method is None or m == method}

    def sessions(self, method: str) -> set[str | None]:
        return {s for m, _, s in self.posts if m == method}


class _Recorder:
    """ASGI middleware noting each POST's JSON-RPC method, TCP connection (client port) and session id."""

    def __init__(self, app: ASGIApp, seen: Seen) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, receive = await read_request(receive)
        headers = dict(scope["headers"])
        session = headers.get(b"mcp-session-id")
        self.seen.posts.append((json.loads(body).get("method", ""), scope["client"][1],
                                session.decode() if session else None))
        await self.app(scope, receive, send)


class _ModernOnly:
    """ASGI middleware making a server speak 2026-07-28 only, as the spec says such a server answers older
    clients: GET and DELETE get 405, a POST without a 2026-era version header gets 400 UnsupportedProtocolVersion."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode()
            if scope["method"] != "POST":
                await Response(status_code=405, headers={"Allow": "POST"})(scope, receive, send)
                return
            if version != MODERN:
                await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                    "code": UNSUPPORTED_PROTOCOL_VERSION, "message": "Unsupported protocol version",
                    "data": {"supported": [MODERN], "requested": version}}}, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _http_server() -> MCPServer:
    server = MCPServer("http-upstream", version="0.1.0")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    def later(text: str = "") -> str:
        """Exists after grow."""
        return f"later:{text}"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool ``later`` and announce the change the way the caller's era has."""
        server.add_tool(later, name="later")
        if ctx.protocol_version == MODERN:
            await ctx.notify_tools_changed()  # only on subscriptions/listen streams
        else:
            await ctx.session.send_tool_list_changed()  # on the session
        return "grown"

    return server


@pytest_asyncio.fixture(loop_scope="session")
async def http_upstream() -> AsyncIterator[tuple[str, Seen]]:
    """The SDK server over streamable HTTP and what it saw (ask for it before ``start_gateway``: it stops after)."""
    seen = Seen()
    app = _http_server().streamable_http_app()
    async with serve_app(_Recorder(app, seen)) as url:
        yield f"{url}/mcp", seen


@pytest_asyncio.fixture(loop_scope="session")
async def modern_only_upstream() -> AsyncIterator[tuple[str, Seen]]:
    """The same server, refusing the handshake era."""
    seen = Seen()
    app = _http_server().streamable_http_app()
    async with serve_app(_Recorder(_ModernOnly(app), seen)) as url:
        yield f"{url}/mcp", seen


async def _async(value: bool) -> bool:
    return value


def _upstream(gateway: Any, name: str) -> McpUpstream:
    found = [u for u in gateway.gateway.registry.upstreams if u.name == name]
    assert found and isinstance(found[0], McpUpstream)
    return found[0]


@pytest.mark.parametrize(("protocol", "era", "probes"), [
    ("auto", HANDSHAKE, 0), ("legacy", HANDSHAKE, 0), ("newest", MODERN, 1), (MODERN, MODERN, 0)])
async def test_an_http_upstream_gets_one_connection_reused_for_every_call(
        protocol, era, probes, http_upstream, start_gateway, configs, connect_mcp):
    url, seen = http_upstream
    gateway = await start_gateway(configs.base({"name": "web", "mcp": {"url": url, "protocol": protocol}}),
                                  {"p.yaml": OPEN})
    assert _upstream(gateway, "web").protocol_version == era
    async with connect_mcp(gateway, "alice", mode=MODERN) as conn:
        results = await asyncio.gather(*(conn.call("web_echo", {"text": f"n{i}"}) for i in range(CALLS)))
        assert [r.content[0].text for r in results] == [f"n{i}" for i in range(CALLS)]
        opened = seen.ports()  # the burst may open a few connections (the client's pool)
        before = len(seen.posts)
        for i in range(CALLS):  # one after another: each on a connection already open
            assert (await conn.call("web_echo", {"text": str(i)})).content[0].text == str(i)

    methods = seen.methods()
    assert methods.count("tools/call") == 2 * CALLS
    if era == MODERN:  # a probe at connect unless the era is pinned, no handshake
        assert (methods.count("server/discover"), methods.count("initialize")) == (probes, 0)
    else:  # the handshake once; every call in its one session
        assert methods.count("initialize") == 1
        assert len(seen.sessions("tools/call")) == 1 and None not in seen.sessions("tools/call")
    later = {port for _, port, _ in seen.posts[before:]}
    assert later <= opened, f"sequential calls opened {len(later - opened)} new connections"


async def test_each_stdio_upstream_speaks_the_era_its_config_asks_and_keeps_its_process(
        start_gateway, configs, connect_mcp):
    gateway = await start_gateway(configs.base(
        configs.mcp_upstream("up"), configs.mcp_upstream("new", protocol="newest"),
        configs.everything_upstream("ev", protocol="newest")), {"p.yaml": OPEN})
    assert _upstream(gateway, "up").protocol_version == HANDSHAKE  # offers both: the handshake comes first
    assert _upstream(gateway, "new").protocol_version == MODERN  # the SDK's server answers server/discover
    assert _upstream(gateway, "ev").protocol_version == HANDSHAKE  # server-everything does not: the fallback
    async with connect_mcp(gateway, "alice", mode="legacy") as conn:
        pids = {(await conn.call(f"{name}_pid")).content[0].text for _ in range(CALLS) for name in ("up", "new")}
        summed = await conn.call("ev_get-sum", {"a": 2, "b": 40})
    assert len(pids) == 2  # one process (one session) per upstream, for every call
    assert "42" in summed.content[0].text


async def test_a_server_that_refuses_the_handshake_is_spoken_to_in_2026(
        modern_only_upstream, start_gateway, configs, connect_mcp, until):
    url, seen = modern_only_upstream
    gateway = await start_gateway(configs.base({"name": "web", "mcp": {"url": url}}), {"p.yaml": OPEN})

    assert _upstream(gateway, "web").protocol_version == MODERN
    assert seen.methods()[:2] == ["initialize", "server/discover"]  # refused, then the probe
    async with connect_mcp(gateway, "bob", mode="legacy") as conn:
        assert (await conn.call("web_echo", {"text": "hi"})).content[0].text == "hi"
        assert (await conn.call("web_grow")).content[0].text == "grown"

        async def listed() -> bool:
            return "web_later" in await conn.tool_names()

        await until(listed)  # heard on the listen stream the gateway keeps open at the upstream


@pytest.mark.parametrize("protocol", ["auto", "newest"])
@pytest.mark.parametrize("client_mode", ["legacy", MODERN])
async def test_an_http_upstreams_list_change_reaches_clients_in_both_eras(
        protocol, client_mode, http_upstream, start_gateway, configs, connect_mcp, until):
    url, seen = http_upstream
    gateway = await start_gateway(configs.base({"name": "web", "mcp": {"url": url, "protocol": protocol}}),
                                  {"p.yaml": OPEN})
    # at 2026-07-28 the gateway hears of changes on a listen stream it keeps open at the upstream
    if protocol == "newest":
        await until(lambda: _async("subscriptions/listen" in seen.methods()))
    else:
        assert "subscriptions/listen" not in seen.methods()
    async with connect_mcp(gateway, "alice", mode=client_mode) as conn:
        assert "web_later" not in await conn.tool_names()
        async with contextlib.AsyncExitStack() as stack:
            sub = await stack.enter_async_context(conn.client.listen(tools_list_changed=True)) \
                if client_mode == MODERN else None
            assert (await conn.call("web_grow")).content[0].text == "grown"

            if sub is not None:
                assert await asyncio.wait_for(sub.__anext__(), 10) == ToolsListChanged()
            else:
                async def told() -> bool:
                    return any(type(m).__name__ == "ToolListChangedNotification" for m in conn.notifications)

                await until(told)
        assert "web_later" in await conn.tool_names()
        assert (await conn.call("web_later", {"text": "x"})).content[0].text == "later:x"


def test_an_unknown_protocol_is_a_config_error(tmp_path, configs):
    upstream = {"name": "web", "mcp": {"url": "http://127.0.0.1:9/mcp", "protocol": "2025-11-25"}}
    path = configs.write(tmp_path, configs.base(upstream), {"p.yaml": OPEN})

    with pytest.raises(ConfigError) as caught:
        configs.load(path)
    assert "protocol" in str(caught.value)
