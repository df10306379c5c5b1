"""The lean HTTP/1.1 transport under HttpUpstream (gateway/upstreams/http_transport.py), against real servers.

Every call is made twice, through the lean transport and through httpx2's own (``lean=False``): the
upstream must receive the same request and the gateway must make the same result of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import pytest
from http_support import ITEM_OPERATIONS, op
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from gateway.core.errors import UpstreamError, UpstreamNotReached
from gateway.upstreams.base import ToolResult
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.http_transport import LeanTransport, lean_transport, proxied_environment

TIMEOUT = 5.0

Serve = Callable[[ASGIApp], Awaitable[str]]


def app() -> Starlette:
    """Echoes requests (with the client's port, to see connection reuse) and answers in various shapes."""

    async def echo(request: Request) -> Response:
        body = await request.body()
        client = request.client
        return JSONResponse({
            "method": request.method, "raw_path": request.scope["raw_path"].decode("latin-1"),
            "query": request.scope["query_string"].decode("latin-1"), "headers": request.headers.items(),
            "body": body.decode("utf-8"), "port": client.port if client else None,
        })

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        if request.query_params.get("as") == "json":
            return JSONResponse({"error": "boom", "code": code}, status_code=code)
        return PlainTextResponse(f"status {code} as text", status_code=code)

    async def latin1(request: Request) -> Response:
        return Response("café".encode("latin-1"), media_type="text/plain; charset=latin-1")

    async def gzipped(request: Request) -> Response:
        data = gzip.compress(json.dumps({"packed": "x" * 5000}).encode())
        return Response(data, media_type="application/json", headers={"content-encoding": "gzip"})

    async def chunked(request: Request) -> Response:
        async def parts() -> AsyncIterator[bytes]:
            for i in range(50):
                yield f"part {i};".encode()
                await asyncio.sleep(0)
        return StreamingResponse(parts(), media_type="text/plain")

    async def redirect(request: Request) -> Response:
        return Response(status_code=302, headers={"location": "/elsewhere"})

    async def empty(request: Request) -> Response:
        return Response(status_code=204)

    async def close(request: Request) -> Response:
        return PlainTextResponse("and goodbye", headers={"connection": "close"})

    return Starlette(routes=[
        Route("/status/{code:int}", status), Route("/latin1", latin1), Route("/gzip", gzipped),
        Route("/chunked", chunked), Route("/redirect", redirect), Route("/empty", empty, methods=["DELETE"]),
        Route("/close", close),
        Route("/{rest:path}", echo, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ])


OPERATIONS = [
    *ITEM_OPERATIONS,
    op("put_item", "PUT", "/items/{item_id}"),
    op("status", "GET", "/status/{code}", query=("as",)),
    op("latin1", "GET", "/latin1"), op("gzip", "GET", "/gzip"), op("chunked", "GET", "/chunked"),
    op("redirect", "GET", "/redirect"), op("empty", "DELETE", "/empty"), op("close", "GET", "/close"),
]

# (tool, arguments): every shape of request and of answer the upstream makes.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_item", {"item_id": "a b#c?", "verbose": True, "tags": ["x", "y"], "n": 1.5, "none": None}),
    ("create_item", {"dry_run": False, "name": "ünïcødé \u2028 \"quoted\"", "nested": {"a": [1, 2, {"b": None}]}}),
    ("update_item", {"item_id": 7, "price": 10**20}),
    ("delete_item", {"item_id": "x"}),
    ("put_item", {"item_id": "y", "body": []}),
    ("status", {"code": 404}), ("status", {"code": 500, "as": "json"}), ("status", {"code": 418}),
    ("latin1", {}), ("gzip", {}), ("chunked", {}), ("redirect", {}), ("empty", {}), ("close", {}),
]


async def started(base_url: str, *, lean: bool, headers: dict[str, str] | None = None) -> HttpUpstream:
    upstream = HttpUpstream("svc", base_url, OPERATIONS, headers=headers, lean=lean)
    await upstream.start()
    return upstream


def comparable(result: ToolResult) -> Any:
    """A result without the client's port (each client has its own connections)."""
    structured = result.structured
    if isinstance(structured, dict) and "port" in structured:
        structured = {k: v for k, v in structured.items() if k != "port"}
        return (structured, result.is_error)
    return (result.content, structured, result.is_error)


async def test_both_transports_send_the_same_requests_and_make_the_same_results(serve: Serve) -> None:
    base = await serve(app())
    lean = await started(base, lean=True, headers={"X-Api-Key": "k1", "User-Agent": "configured/1"})
    plain = await started(base, lean=False, headers={"X-Api-Key": "k1", "User-Agent": "configured/1"})
    try:
        assert isinstance(lean.transport, LeanTransport) and plain.transport is None
        for tool, arguments in CALLS:
            fast = await lean.call(tool, arguments, TIMEOUT)
            slow = await plain.call(tool, arguments, TIMEOUT)
            assert comparable(fast) == comparable(slow), tool
        assert lean.transport.requests == len(CALLS)  # every call went the lean way, none fell back
    finally:
        await lean.close()
        await plain.close()


async def test_sequential_calls_reuse_one_connection(serve: Serve) -> None:
    upstream = await started(await serve(app()), lean=True)
    try:
        ports = set()
        for i in range(20):
            result = await upstream.call("create_item", {"i": i}, TIMEOUT)
            assert isinstance(result.structured, dict)
            ports.add(result.structured["port"])
        assert len(ports) == 1
        assert isinstance(upstream.transport, LeanTransport) and upstream.transport.idle == 1
    finally:
        await upstream.close()


async def test_a_connection_the_server_closed_is_not_reused(serve: Serve) -> None:
    upstream = await started(await serve(app()), lean=True)
    try:
        first = await upstream.call("create_item", {}, TIMEOUT)
        assert (await upstream.call("close", {}, TIMEOUT)).text == "and goodbye"  # same connection, then closed
        after = await upstream.call("create_item", {}, TIMEOUT)
        assert isinstance(first.structured, dict) and isinstance(after.structured, dict)
        assert after.structured["port"] != first.structured["port"]
    finally:
        await upstream.close()


@contextlib.asynccontextmanager
async def raw_upstream(answer: Callable[[bytes], bytes], *,
                       close: bool) -> AsyncIterator[tuple[HttpUpstream, list[bytes]]]:
    """A lean upstream in front of a loopback server that reads one request head per connection and
    writes ``answer(head)``; yields the upstream and the heads (with bodies) the server read."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                               if line.startswith(b"content-length:")), 0)
                head += await reader.readexactly(length)
                heads.append(head)
                writer.write(answer(head))
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    upstream = await started(f"http://127.0.0.1:{port}", lean=True)
    try:
        yield upstream, heads
    finally:
        await upstream.close()
        server.close()


async def test_a_body_that_ends_with_the_connection_is_read_to_the_end() -> None:
    async with raw_upstream(lambda head: b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the close",
                            close=True) as (upstream, _):
        for _ in range(2):  # and the closed connection is not used again
            assert (await upstream.call("latin1", {}, TIMEOUT)).text == "until the close"


async def test_an_interim_103_answer_is_skipped() -> None:
    async with raw_upstream(
            lambda head: b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n"
                         b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 8\r\n\r\n{\"a\": 1}",
            close=False) as (upstream, _):
        result = await upstream.call("latin1", {}, TIMEOUT)
        assert result.structured == {"a": 1} and not result.is_error


async def test_a_server_that_hangs_up_without_answering_is_a_failure_not_a_not_reached() -> None:
    async with raw_upstream(lambda head: b"", close=True) as (upstream, heads):
        with pytest.raises(UpstreamError, match="disconnected without sending a response") as caught:
            await upstream.call("create_item", {"x": 1}, TIMEOUT)
        assert not isinstance(caught.value, UpstreamNotReached)  # the request went out: it may have acted
        assert heads and heads[0].startswith(b"POST /items HTTP/1.1\r\n")


async def test_a_malformed_response_is_an_upstream_error() -> None:
    async with raw_upstream(lambda head: b"HTTP/1.1 abc nonsense\r\n\r\n", close=True) as (upstream, _):
        with pytest.raises(UpstreamError, match="RemoteProtocolError"):
            await upstream.call("latin1", {}, TIMEOUT)


async def test_connection_refused_is_not_reached(refused_url: str) -> None:
    upstream = await started(refused_url, lean=True)
    try:
        with pytest.raises(UpstreamNotReached):
            await upstream.call("create_item", {}, TIMEOUT)
    finally:
        await upstream.close()


async def test_no_more_connections_than_the_limit() -> None:
    open_now, most = 0, 0
    release = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, most
        open_now += 1
        most = max(most, open_now)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            open_now -= 1
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    transport = LeanTransport(httpx2.AsyncHTTPTransport(), max_connections=2, keepalive_expiry=5.0)
    client = httpx2.AsyncClient(transport=transport)
    try:
        calls = [asyncio.ensure_future(client.get(f"{base}/{i}")) for i in range(6)]
        await asyncio.sleep(0.2)
        assert most == 2  # the other four wait for a connection
        release.set()
        answers = await asyncio.gather(*calls)
        assert [a.text for a in answers] == ["ok"] * 6 and most == 2
    finally:
        await client.aclose()
        server.close()


async def test_a_proxy_in_the_environment_leaves_requests_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    upstream = await started("http://127.0.0.1:9", lean=True)
    try:
        assert upstream.transport is None  # httpx2's own transports, which honour the proxy
    finally:
        await upstream.close()


# Proxy environments, and whether httpx2 (trust_env) would send some request through a proxy in each.
PROXY_ENVIRONMENTS: list[tuple[dict[str, str], bool]] = [
    ({}, False),
    ({"HTTP_PROXY": "http://127.0.0.1:9"}, True),
    ({"http_proxy": "http://127.0.0.1:9"}, True),
    ({"HTTPS_PROXY": "http://127.0.0.1:9"}, True),
    ({"ALL_PROXY": "socks5://127.0.0.1:9"}, True),
    ({"all_proxy": "127.0.0.1:9"}, True),
    ({"HTTP_PROXY": "proxy.internal:3128"}, True),
    ({"HTTP_PROXY": ""}, False),
    ({"FTP_PROXY": "http://127.0.0.1:9"}, False),
    ({"NO_PROXY": "localhost"}, False),
    ({"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "*"}, False),
    ({"ALL_PROXY": "http://127.0.0.1:9", "no_proxy": "localhost, * "}, False),
    ({"HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "localhost,127.0.0.1,::1,.internal"}, True),
    ({"ALL_PROXY": "http://127.0.0.1:9", "NO_PROXY": "*.example.com,http://a.example"}, True),
    ({"HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": ""}, False),
]


@pytest.mark.parametrize(("environment", "proxied"), PROXY_ENVIRONMENTS)
async def test_proxied_environment_reads_the_environment_as_httpx2_does(
        monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], proxied: bool) -> None:
    from httpx2._utils import get_environment_proxies  # the reference: httpx2's own reading (private to it)

    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert any(url is not None for url in get_environment_proxies().values()) is proxied
    assert proxied_environment() is proxied
    transport = lean_transport(httpx2.Limits(max_connections=4, keepalive_expiry=5.0))
    assert (transport is None) is proxied  # a proxy leaves every request to httpx2's own transports
    if transport is not None:
        await transport.aclose()


async def test_a_response_still_open_when_the_upstream_closes_does_not_keep_its_connection(serve: Serve) -> None:
    base = await serve(app())
    transport = LeanTransport(httpx2.AsyncHTTPTransport(), max_connections=4, keepalive_expiry=5.0)
    client = httpx2.AsyncClient(transport=transport)
    async with client.stream("GET", f"{base}/chunked") as response:
        await client.aclose()  # the upstream is stopped (a reload) while this answer is read
        assert (await response.aread()).startswith(b"part 0;")
    assert transport.requests == 1
    assert transport.idle == 0  # closed, not pooled by a transport that is gone
