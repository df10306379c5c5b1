"""HttpUpstream against a real Starlette app on loopback: what goes out, and what comes back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from http_support import ITEM_OPERATIONS, op
from hypothesis import assume, given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp
from token_endpoint import CLIENT_ID, CLIENT_SECRET, TokenEndpointApp

from gateway.core.errors import InvalidArgumentsError, UpstreamCredentialsError, UpstreamError
from gateway.upstreams.credentials import ClientCredentials
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.token_client import TokenClient, TokenEndpoint

TIMEOUT = 5.0

# Fixture types (tests/conftest.py hands these out).
Serve = Callable[[ASGIApp], Awaitable[str]]


def echo_app(release: asyncio.Event | None = None) -> Starlette:
    """Echoes every request back as JSON; a few paths answer with fixed statuses or bodies."""

    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse({
            "method": request.method,
            "raw_path": request.scope["raw_path"].decode("latin-1"),
            "query": request.scope["query_string"].decode("latin-1"),
            "params": dict(request.query_params),
            "headers": dict(request.headers),
            "body": body.decode("utf-8"),
        })

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        if request.query_params.get("as") == "json":
            return JSONResponse({"error": "boom", "code": code}, status_code=code)
        return PlainTextResponse(f"status {code} as text", status_code=code)

    async def text(request: Request) -> Response:
        return PlainTextResponse("plain words, not JSON")

    async def slow(request: Request) -> Response:
        assert release is not None
        await release.wait()
        return PlainTextResponse("late")

    return Starlette(routes=[
        Route("/status/{code:int}", status),
        Route("/text", text),
        Route("/slow", slow),
        Route("/{rest:path}", echo, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ])


OPERATIONS = [
    *ITEM_OPERATIONS,
    op("status", "GET", "/status/{code}", query=("as",)),
    op("text", "GET", "/text"),
    op("slow", "GET", "/slow"),
]


async def started(base_url: str, headers: dict[str, str] | None = None) -> HttpUpstream:
    upstream = HttpUpstream("svc", base_url, OPERATIONS, headers=headers)
    await upstream.start()
    return upstream


async def echoed(upstream: HttpUpstream, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await upstream.call(tool, arguments, TIMEOUT)
    assert not result.is_error, result.text
    assert isinstance(result.structured, dict)
    return result.structured


@pytest.mark.parametrize("value, encoded", [
    ("evil?x=1", "evil%3Fx%3D1"),
    ("http:evil", "http%3Aevil"),
    ("a b#frag", "a%20b%23frag"),
    ("@evil.example", "%40evil.example"),
    ("%2e%2e", "%252e%252e"),
])
async def test_path_argument_stays_inside_its_placeholder(serve: Serve, value: str, encoded: str) -> None:
    base = await serve(echo_app())
    upstream = await started(base + "/api")
    try:
        got = await echoed(upstream, "get_item", {"item_id": value})
    finally:
        await upstream.close()
    assert got["raw_path"] == f"/api/items/{encoded}/detail"
    assert got["query"] == ""
    assert got["headers"]["host"] == urlsplit(base).netloc


def assert_confined(url: str) -> None:
    """The URL, as the client will send it, has the base's origin and the template's other segments."""
    parsed = httpx2.URL(url)
    assert (parsed.scheme, parsed.host, parsed.port) == ("http", "127.0.0.1", 9)
    segments = parsed.raw_path.decode("ascii").split("/")
    assert len(segments) == 5 and segments[:3] == ["", "api", "items"] and segments[4] == "detail", segments
    assert parsed.query == b""


@given(st.text(min_size=1))
def test_any_path_argument_keeps_scheme_host_port_and_segments(value: str) -> None:
    assume(value not in (".", "..") and "/" not in value and "\\" not in value)  # refused: see below
    upstream = HttpUpstream("svc", "http://127.0.0.1:9/api", OPERATIONS)
    _, url, query, _ = upstream.request_for("get_item", {"item_id": value})
    assert query == {}
    assert_confined(url)


# Servers decode %2F before routing and clients collapse dot segments, so these are refused
# rather than encoded: they could otherwise reach a different route than the policy saw.
@pytest.mark.parametrize("value", [".", "..", "", "../admin", "a/b", "//evil.example:81/x", "http://evil", "a\\b"])
def test_a_path_argument_that_could_leave_its_segment_is_refused(value: str) -> None:
    upstream = HttpUpstream("svc", "http://127.0.0.1:9/api", OPERATIONS)
    with pytest.raises(InvalidArgumentsError, match="single, non-empty path segment"):
        upstream.request_for("get_item", {"item_id": value})


async def test_get_sends_arguments_as_query_and_no_body(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        got = await echoed(upstream, "get_item", {"item_id": 7, "verbose": True, "extra": "x y", "tags": [1, 2]})
    finally:
        await upstream.close()
    assert got["method"] == "GET"
    assert got["raw_path"] == "/items/7/detail"
    assert got["query"] == "verbose=true&extra=x+y&tags=1&tags=2"  # a list is repeated keys, as OpenAPI does
    assert got["body"] == ""
    assert "content-length" not in got["headers"] and "transfer-encoding" not in got["headers"]


async def test_post_sends_json_body_and_declared_query(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        got = await echoed(upstream, "create_item", {"dry_run": False, "name": "lamp", "spec": {"watts": 40}})
    finally:
        await upstream.close()
    assert got["method"] == "POST"
    assert got["params"] == {"dry_run": "false"}
    assert got["headers"]["content-type"] == "application/json"
    assert json.loads(got["body"]) == {"name": "lamp", "spec": {"watts": 40}}


async def test_patch_body_excludes_path_arguments(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        got = await echoed(upstream, "update_item", {"item_id": "a b", "name": "new"})
    finally:
        await upstream.close()
    assert got["raw_path"] == "/items/a%20b"
    assert json.loads(got["body"]) == {"name": "new"}


async def test_delete_sends_no_body_by_default(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        got = await echoed(upstream, "delete_item", {"item_id": 3})
    finally:
        await upstream.close()
    assert (got["method"], got["raw_path"], got["body"]) == ("DELETE", "/items/3", "")


async def test_configured_headers_are_sent(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()), headers={"X-Api-Key": "k-123", "X-Team": "pets"})
    try:
        got = await echoed(upstream, "get_item", {"item_id": 1})
    finally:
        await upstream.close()
    assert got["headers"]["x-api-key"] == "k-123"
    assert got["headers"]["x-team"] == "pets"


@pytest.mark.parametrize("code", [400, 404, 500, 503])
async def test_error_status_is_a_tool_error_with_the_status_text(serve: Serve, code: int) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        result = await upstream.call("status", {"code": code}, TIMEOUT)
    finally:
        await upstream.close()
    assert result.is_error
    assert result.text == f"HTTP {code}: status {code} as text"
    assert result.structured is None


async def test_json_error_body_is_kept_as_structure(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        result = await upstream.call("status", {"code": 422, "as": "json"}, TIMEOUT)
    finally:
        await upstream.close()
    assert result.is_error
    assert result.text.startswith("HTTP 422: ") and json.loads(result.text[10:]) == {"error": "boom", "code": 422}
    assert result.structured == {"error": "boom", "code": 422}


async def test_non_json_body_becomes_text(serve: Serve) -> None:
    upstream = await started(await serve(echo_app()))
    try:
        result = await upstream.call("text", {}, TIMEOUT)
    finally:
        await upstream.close()
    assert not result.is_error
    assert result.content == [{"type": "text", "text": "plain words, not JSON"}]
    assert result.structured is None


async def test_timeout_raises_upstream_error(serve: Serve) -> None:
    release = asyncio.Event()
    upstream = await started(await serve(echo_app(release)))
    try:
        with pytest.raises(UpstreamError, match=r"timed out after 0\.2s"):
            await upstream.call("slow", {}, 0.2)
    finally:
        release.set()
        await upstream.close()


async def test_connection_refused_raises_upstream_error(refused_url: str) -> None:
    upstream = await started(refused_url)
    try:
        with pytest.raises(UpstreamError, match="ConnectError") as caught:
            await upstream.call("get_item", {"item_id": 1}, TIMEOUT)
    finally:
        await upstream.close()
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)


async def test_missing_path_argument_is_refused() -> None:
    upstream = await started("http://127.0.0.1:9")
    try:
        with pytest.raises(InvalidArgumentsError, match="missing path argument"):
            await upstream.call("get_item", {"verbose": True}, TIMEOUT)
    finally:
        await upstream.close()


async def test_call_before_start_raises_upstream_error() -> None:
    upstream = HttpUpstream("svc", "http://127.0.0.1:9", OPERATIONS)
    with pytest.raises(UpstreamError, match="not started"):
        await upstream.call("text", {}, TIMEOUT)


async def test_a_token_from_the_idp_is_never_sent_over_plain_http_beyond_loopback(serve: Serve) -> None:
    idp = TokenEndpointApp()
    url = await serve(idp.app())
    credentials = ClientCredentials(TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, f"{url}/token"), "remote"))
    # 192.0.2.0/24 is TEST-NET: never routed, and nothing is sent there anyway
    upstream = HttpUpstream("remote", "http://192.0.2.7", [op("ping", "GET", "/ping")], credentials=credentials)
    await upstream.start()
    try:
        with pytest.raises(UpstreamCredentialsError, match="not https"):
            await upstream.call("ping", {}, TIMEOUT)
    finally:
        await upstream.close()
    assert idp.requests == []  # not even a token was asked for
