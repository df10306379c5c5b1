"""Upstream responses are bounded: the HTTP timeout is a deadline for the whole call, and a response past
``limits.max_response_bytes`` fails the call ("The tool failed", audited as "response too large") without
the gateway buffering it. Real upstreams on loopback: a Starlette service that drips or floods, MCP servers
over streamable HTTP (SSE and JSON responses) and over stdio.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from loopback import serve_app
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.core.limits import MAX_RESPONSE_BYTES
from gateway.pipeline.lifecycle import TOOL_FAILED

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

REPORTER = Path(__file__).parents[1] / "env_report_server.py"
MIB = 1024 * 1024
OPEN = {"open.yaml": "policy: open\nrules: []\n"}


class Flood:
    """An HTTP service that drips a byte at a time, or streams a huge body; it counts what it sent.

    The huge body is written by a raw asyncio server that waits for each MiB to drain into the
    socket, so ``sent`` is what really left, and ``cut`` says the client closed the connection.
    """

    def __init__(self) -> None:
        self.sent = 0
        self.cut = False
        self.finished = False
        self.dripped = 0  # bytes of /drip sent so far (all 300 only if nobody cut it short)

    def app(self) -> Starlette:
        async def drip(request: Request) -> StreamingResponse:
            async def body() -> AsyncIterator[bytes]:
                for _ in range(300):  # a minute, at one byte per 0.2 s
                    self.dripped += 1
                    yield b"x"
                    await asyncio.sleep(0.2)
            return StreamingResponse(body(), media_type="text/plain")

        async def declared(request: Request) -> Response:
            # Says 200 MiB, sends a little and then waits: only the header can tell how big it is.
            async def body() -> AsyncIterator[bytes]:
                yield b"x" * 1024
                await asyncio.sleep(30)
            return StreamingResponse(body(), media_type="text/plain", headers={"content-length": str(200 * MIB)})

        return Starlette(routes=[Route("/drip", drip), Route("/declared", declared)])

    async def huge(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """GET /huge?mib=N: N MiB of x, the body ending when the connection closes (no length)."""
        head = await reader.readuntil(b"\r\n\r\n")
        mib = int(head.split(b" ")[1].partition(b"mib=")[2] or b"200")
        chunk = b"x" * MIB
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
            for _ in range(mib):
                writer.write(chunk)
                await writer.drain()
                self.sent += len(chunk)
            self.finished = True
        except OSError:
            self.cut = True
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


TOOLS = [{"name": "drip", "method": "GET", "path": "/drip"},
         {"name": "declared", "method": "GET", "path": "/declared"}]
HUGE = [{"name": "huge", "method": "GET", "path": "/huge",
         "input_schema": {"type": "object", "properties": {"mib": {"type": "integer"}}}}]


@contextlib.asynccontextmanager
async def flooding() -> AsyncIterator[tuple[Flood, str, str]]:
    """(the flood, the Starlette service's URL, the raw huge-body server's URL)."""
    flood = Flood()
    raw = await asyncio.start_server(flood.huge, "127.0.0.1", 0)
    try:
        async with serve_app(flood.app(), lifespan="off", grace=0.5) as url:
            yield flood, url, f"http://127.0.0.1:{raw.sockets[0].getsockname()[1]}"
    finally:
        raw.close()


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


async def test_http_timeout_is_a_deadline_for_the_whole_call(start_gateway: Any, configs: Any, rest: Any,
                                                               rest_call: Any, call_id: Any) -> None:
    async with flooding() as (flood, url, _raw):
        gw = await start_gateway(configs.base(configs.http_upstream("flood", url, TOOLS, {"timeout": "1s"})), OPEN)
        cid = call_id()
        started = time.monotonic()
        body = await rest_call(rest(gw), "flood_drip", call_id=cid)
        elapsed = time.monotonic() - started
        dripped = flood.dripped
    assert (body["decision"], body["content"][0]["text"]) == ("tool_failed", TOOL_FAILED)
    # Each byte came within 0.2 s, so no per-read timer fired: the call was cut mid-body by the one deadline.
    assert dripped < 300, "the gateway waited for the whole minute-long body"
    assert elapsed >= 0.9  # not before the deadline (a lower bound: load only adds to it)
    assert "timed out after 1.0s" in gw.audit_event(cid)["upstream_outcome"]["error"]


async def test_a_200_mb_http_response_is_cut_at_the_limit_without_buffering_it(
        start_gateway: Any, configs: Any, rest: Any, rest_call: Any, call_id: Any) -> None:
    async with flooding() as (flood, _, url):
        gw = await start_gateway(configs.base(configs.http_upstream("flood", url, HUGE)), OPEN)  # default limit
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to now
        before = _rss_kib("VmRSS")
        cid = call_id()
        body = await rest_call(rest(gw), "flood_huge", {"mib": 200}, call_id=cid)
        peak_growth_mib = (_rss_kib("VmHWM") - before) / 1024
        async with asyncio.timeout(30):  # until the service notices the cut connection (or, wrongly, finishes)
            while not (flood.cut or flood.finished):
                await asyncio.sleep(0.05)
        sent_mib = flood.sent / MIB
    assert (body["decision"], body["content"][0]["text"]) == ("tool_failed", TOOL_FAILED)
    assert "response too large" in gw.audit_event(cid)["upstream_outcome"]["error"]
    assert flood.cut and not flood.finished and sent_mib < 100, f"the upstream sent {sent_mib:.0f} MiB"
    # The server writing the 200 MiB lives in this process too; the gateway keeps ~10 MiB at most.
    assert peak_growth_mib < 100, f"peak RSS grew by {peak_growth_mib:.0f} MiB"


async def test_a_declared_length_over_the_limit_is_refused_before_the_body(
        start_gateway: Any, configs: Any, rest: Any, rest_call: Any, call_id: Any) -> None:
    async with flooding() as (_, url, _raw):
        gw = await start_gateway(configs.base(configs.http_upstream("flood", url, TOOLS, {"timeout": "20s"})), OPEN)
        cid = call_id()
        body = await rest_call(rest(gw), "flood_declared", call_id=cid)
    # The body stalls for 30 s, past the 20 s timeout: a gateway that read it would fail with a timeout instead.
    assert body["decision"] == "tool_failed"
    assert f"{200 * MIB} bytes declared, the limit is {MAX_RESPONSE_BYTES}" in \
        gw.audit_event(cid)["upstream_outcome"]["error"]


async def test_a_response_under_a_configured_limit_passes_and_one_over_it_fails(
        start_gateway: Any, configs: Any, rest: Any, rest_call: Any, call_id: Any) -> None:
    async with flooding() as (_, _url, url):
        gw = await start_gateway(configs.base(configs.http_upstream("flood", url, HUGE),
                                              limits={"call_timeout": 10, "max_response_bytes": 2 * MIB}), OPEN)
        client = rest(gw)
        ok = await rest_call(client, "flood_huge", {"mib": 2})
        assert ok["decision"] == "allow" and len(ok["content"][0]["text"]) == 2 * MIB
        cid = call_id()
        refused = await rest_call(client, "flood_huge", {"mib": 3}, call_id=cid)
    assert refused["decision"] == "tool_failed"
    assert "response too large: more than 2097152 bytes" in gw.audit_event(cid)["upstream_outcome"]["error"]


def _blob_server() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="blob", input_schema={
            "type": "object", "properties": {"size": {"type": "integer"}}})])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        size = int((params.arguments or {})["size"])
        return types.CallToolResult(content=[types.TextContent(type="text", text="x" * size)])

    return Server("blob", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


@contextlib.asynccontextmanager
async def blob_mcp(json_response: bool) -> AsyncIterator[str]:
    sessions = StreamableHTTPSessionManager(app=_blob_server(), json_response=json_response)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    app = Starlette(routes=[Route("/mcp", StreamableHTTPASGIApp(sessions))], lifespan=lifespan)
    async with serve_app(app, grace=0.5) as url:
        yield f"{url}/mcp"


async def _over_and_under(gw: Any, rest: Any, rest_call: Any, call_id: Any, why: str) -> None:
    client = rest(gw)
    cid = call_id()
    refused = await rest_call(client, "blob_blob", {"size": 2 * MIB}, call_id=cid)
    assert (refused["decision"], refused["content"][0]["text"]) == ("tool_failed", TOOL_FAILED)
    error = gw.audit_event(cid)["upstream_outcome"]["error"]
    assert why in error and str(MIB) in error, error
    ok = await rest_call(client, "blob_blob", {"size": 100_000})  # the same upstream still serves
    assert ok["decision"] == "allow" and len(ok["content"][0]["text"]) == 100_000


async def test_mcp_streamable_http_responses_are_bounded(start_gateway: Any, configs: Any, rest: Any,
                                                         rest_call: Any, call_id: Any) -> None:
    # SSE events are capped by the SDK (given the limit); whole JSON bodies by the gateway's transport,
    # before the SDK reads them.
    for json_response, why in ((False, "Server-sent event exceeded the"),
                               (True, "Failed to parse JSON response: response too large")):
        async with blob_mcp(json_response) as url:
            gw = await start_gateway(configs.base({"name": "blob", "mcp": {"url": url}},
                                                  limits={"call_timeout": 10, "max_response_bytes": MIB}), OPEN)
            await _over_and_under(gw, rest, rest_call, call_id, why)


async def test_mcp_stdio_results_over_the_limit_are_not_kept(start_gateway: Any, configs: Any, rest: Any,
                                                             rest_call: Any, call_id: Any) -> None:
    upstream = {"name": "blob", "mcp": {"command": sys.executable, "args": [str(REPORTER), "mcp"]}}
    gw = await start_gateway(configs.base(upstream, limits={"call_timeout": 10, "max_response_bytes": MIB}), OPEN)
    await _over_and_under(gw, rest, rest_call, call_id, "response too large")
