"""The contract of gateway/frontends/mcp/_sdk.py: every private name of the MCP SDK it relies on, pinned.

Each name is first looked up in the SDK itself (so a rename fails here, naming the ``_sdk.py`` function that
relies on it, not as an import error somewhere else), then the wrapper is exercised on real SDK objects: a
real session manager opening a real session, a real transport, a real server and runner.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
from starlette.requests import Request

SDK = "gateway/frontends/mcp/_sdk.py"
MODERN = "mcp.server._streamable_http_modern"

# (the _sdk.py name that relies on it, the SDK module, the dotted name in it, what it must be)
RELIED_ON: list[tuple[str, str, str, Callable[[Any], bool]]] = [
    ("SSE_HEADERS", MODERN, "_SSE_HEADERS", lambda v: isinstance(v, list)),
    ("sse_ping_interval", MODERN, "_SSE_PING_INTERVAL", lambda v: isinstance(v, float)),
    ("sse_event", MODERN, "_sse_event", callable),
    ("write_answer", MODERN, "_write", inspect.iscoroutinefunction),
    ("param_rejection", MODERN, "_mcp_param_rejection", inspect.iscoroutinefunction),
    ("quiet_sdk_span", "mcp.server._otel", "OpenTelemetryMiddleware", inspect.isclass),
    ("result_serializer", "mcp.server.runner", "ServerRunner._serialize", callable),
    ("SessionManager", "mcp.server.streamable_http_manager", "StreamableHTTPSessionManager._admit_session",
     callable),
]

# (the _sdk.py name, the SDK function, its parameters as _sdk.py passes them)
SIGNATURES = [
    ("sse_event", MODERN, "_sse_event", ["msg"]),
    ("write_answer", MODERN, "_write", ["msg", "scope", "receive", "send"]),
    ("param_rejection", MODERN, "_mcp_param_rejection", ["app", "request", "req", "verdict", "lifespan_state"]),
    ("result_serializer", "mcp.server.runner", "ServerRunner._serialize", ["self", "method", "version", "result"]),
    ("SessionManager", "mcp.server.streamable_http_manager", "StreamableHTTPSessionManager._admit_session",
     ["self", "requestor"]),
]


def _lookup(module: str, dotted: str) -> Any:
    value: Any = importlib.import_module(module)
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize(("user", "module", "name", "shape"), RELIED_ON, ids=[r[0] for r in RELIED_ON])
def test_each_private_name_relied_on_is_there(user: str, module: str, name: str, shape: Callable[[Any], bool]) -> None:
    try:
        value = _lookup(module, name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{SDK}: {user} relies on {module}.{name}, which this SDK no longer has ({exc})")
    assert shape(value), f"{SDK}: {user} relies on {module}.{name} being what it was, it is now {value!r}"


@pytest.mark.parametrize(("user", "module", "name", "params"), SIGNATURES, ids=[s[0] for s in SIGNATURES])
def test_each_private_function_takes_what_it_is_passed(user: str, module: str, name: str, params: list[str]) -> None:
    found = list(inspect.signature(_lookup(module, name)).parameters)
    assert found == params, f"{SDK}: {user} calls {module}.{name}{tuple(params)}, whose parameters are now {found}"


def test_the_sse_pieces_are_those_of_the_sdk_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.frontends.mcp import _sdk

    assert (b"content-type", b"text/event-stream") in _sdk.SSE_HEADERS, f"{SDK}: SSE_HEADERS"
    assert all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in _sdk.SSE_HEADERS), f"{SDK}: SSE_HEADERS"
    answer = types.JSONRPCResponse(jsonrpc="2.0", id=7, result={"ok": True})
    frame = _sdk.sse_event(answer)
    assert frame.startswith(b"event: message\r\ndata: ") and frame.endswith(b"\r\n\r\n"), f"{SDK}: sse_event"
    assert json.loads(frame.split(b"data: ", 1)[1]) == {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}
    # Read per call, as the SDK reads it: a changed window is seen at once (the lean tests shorten it).
    monkeypatch.setattr(importlib.import_module(MODERN), "_SSE_PING_INTERVAL", 0.25)
    assert _sdk.sse_ping_interval() == 0.25, f"{SDK}: sse_ping_interval"


async def _served(write: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await write({"type": "http", "method": "POST", "headers": []}, receive, send)
    return sent


async def test_write_answer_is_json_with_the_status_of_its_error_code() -> None:
    from gateway.frontends.mcp import _sdk

    ok = types.JSONRPCResponse(jsonrpc="2.0", id=1, result={})
    sent = await _served(lambda scope, receive, send: _sdk.write_answer(ok, scope, receive, send))
    assert sent[0]["status"] == 200 and (b"content-type", b"application/json") in sent[0]["headers"], SDK
    assert sent[1]["body"] == b'{"jsonrpc":"2.0","id":1,"result":{}}', f"{SDK}: write_answer"
    refused = types.JSONRPCError(jsonrpc="2.0", id=2, error=types.ErrorData(code=types.INVALID_PARAMS, message="x"))
    sent = await _served(lambda scope, receive, send: _sdk.write_answer(refused, scope, receive, send))
    assert sent[0]["status"] == 400, f"{SDK}: write_answer maps -32602 to 400"


ROUTED = {"type": "object", "properties": {"q": {"type": "string", "x-mcp-header": "Query"}}}
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}


async def test_param_rejection_checks_the_mcp_param_headers_against_the_tool_schema() -> None:
    from gateway.frontends.mcp import _sdk

    server: Server[Any] = Server("pinned", get_tool_input_schema=lambda name: ROUTED if name == "search" else None)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "search", "arguments": {"q": "cats"}, "_meta": ENVELOPE}}
    envelope = types.JSONRPCRequest.model_validate(message)

    async def rejection(headers: dict[str, str]) -> Any:
        raw = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "search", **headers}
        verdict = classify_inbound_request(message, headers=raw)
        assert isinstance(verdict, InboundModernRoute), verdict
        request = Request({"type": "http", "method": "POST", "headers": [(k.encode(), v.encode())
                                                                       for k, v in raw.items()]})
        return await _sdk.param_rejection(server, request, envelope, verdict)

    assert await rejection({"mcp-param-query": "cats"}) is None, f"{SDK}: param_rejection passes matching headers"
    assert await rejection({"mcp-param-query": "dogs"}) is not None, f"{SDK}: param_rejection refuses a mismatch"


def test_quiet_sdk_span_knows_the_server_s_default_middleware() -> None:
    from opentelemetry import trace

    from gateway.frontends.mcp import _sdk

    default = Server("pinned").middleware
    assert len(default) == 1, f"{SDK}: quiet_sdk_span accounts for one default middleware, the server has {default}"
    spans_off = isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    assert _sdk.quiet_sdk_span(default[0]) is spans_off, f"{SDK}: quiet_sdk_span"
    assert _sdk.quiet_sdk_span(lambda ctx, call_next: None) is False, f"{SDK}: quiet_sdk_span"


def test_result_serializer_shapes_results_as_the_runner_does() -> None:
    from gateway.frontends.mcp import _sdk

    serialize = _sdk.result_serializer(Server("pinned", version="9"))
    result = types.CallToolResult(content=[types.TextContent(type="text", text="hi")])
    modern = serialize("tools/call", "2026-07-28", result)
    assert modern["resultType"] == "complete" and modern["content"] == [{"type": "text", "text": "hi"}], SDK
    assert "io.modelcontextprotocol/serverInfo" in modern["_meta"], f"{SDK}: result_serializer stamps serverInfo"
    legacy = serialize("tools/call", "2025-11-25", result)
    assert "resultType" not in legacy and "_meta" not in legacy, f"{SDK}: result_serializer, handshake era"


def _user(client_id: str) -> AuthenticatedUser:
    return AuthenticatedUser(AccessToken(token="t", client_id=client_id, scopes=[]))


async def test_session_manager_reads_and_admits_as_the_sdk_manager_keeps_sessions() -> None:
    from gateway.frontends.mcp import _sdk

    admitted: list[StreamableHTTPServerTransport] = []

    class Recording(_sdk.SessionManager):
        allow = True

        def admits(self, requestor: Any) -> bool:
            return self.allow

        def admitted(self, transport: StreamableHTTPServerTransport) -> None:
            admitted.append(transport)

    manager = Recording(app=Server("pinned"), session_idle_timeout=30.0)
    for attribute in ("_server_instances", "_session_owners"):
        assert isinstance(getattr(manager, attribute, None), dict), f"{SDK}: SessionManager relies on {attribute}"
    owner = authorization_context(_user("alice"))
    async with manager.run():
        transport = manager._admit_session(owner)  # as the SDK calls it, under its lock
        assert transport is not None and admitted == [transport], f"{SDK}: SessionManager.admitted"
        session_id = transport.mcp_session_id
        assert session_id is not None
        assert manager.transport(session_id) is transport, f"{SDK}: SessionManager.transport"
        assert manager.owner(session_id) == owner, f"{SDK}: SessionManager.owner"
        assert list(manager.owners()) == [owner], f"{SDK}: SessionManager.owners"
        assert manager.transport("unknown") is None and manager.owner("unknown") is None, SDK
        Recording.allow = False
        assert manager._admit_session(owner) is None, f"{SDK}: SessionManager.admits refuses"
        assert len(admitted) == 1


async def test_holding_suspends_the_transport_s_idle_countdown_as_its_own_requests_do() -> None:
    from gateway.frontends.mcp import _sdk

    transport = StreamableHTTPServerTransport(mcp_session_id="pinned", idle_timeout=30.0)
    assert transport._idle_timeout == 30.0, f"{SDK}: holding relies on the transport's _idle_timeout"
    assert transport._requests_in_flight == 0, f"{SDK}: holding relies on the transport's _requests_in_flight"
    with _sdk.holding(transport):  # no idle scope yet (the session is not served): nothing to hold
        assert transport._requests_in_flight == 0
    transport.idle_scope = anyio.CancelScope()  # as the transport sets it when the session's server runs
    with _sdk.holding(transport):
        assert transport._requests_in_flight == 1, f"{SDK}: holding counts the request"
        assert transport.idle_scope.deadline == math.inf, f"{SDK}: holding stops the countdown"
        with _sdk.holding(transport):
            assert transport._requests_in_flight == 2
        assert transport.idle_scope.deadline == math.inf, f"{SDK}: holding, while another request is in flight"
    assert transport._requests_in_flight == 0
    assert transport.idle_scope.deadline <= anyio.current_time() + 30.0 < math.inf, f"{SDK}: holding restarts it"
