"""The lean tools/call path: a qualifying call answered here, without the SDK's server and transport machinery.

Through the SDK a tools/call crosses a session transport (memory streams, a message router, a writer task),
the JSON-RPC dispatcher (a task per request, cancel scopes) and the server runner; in the 2026-07-28 era a
task group, a memory stream and two tasks per request. For a call that can carry nothing but its result,
``LeanCalls`` (ASGI middleware where ``QuietCalls`` sits, after auth) parses the request once, builds the
pipeline's ``CallRequest`` with the frontend's own ``build_call_request``, runs ``Gateway.call``, shapes the
result with ``McpFrontend.answer``/``tool_result`` and the SDK's own result serialiser, and writes the one
``application/json`` response the SDK would have written, byte for byte.

A request qualifies only when every check the SDK would make first passes, using the SDK's own functions
(Accept, Content-Type, body size, JSON-RPC envelope, params validation, and for 2026-07-28 the routing
headers, the ``_meta`` envelope and the ``Mcp-Param-*`` headers); anything else, hostile input included,
goes on to the SDK path unchanged, so every refusal is the SDK's own. It must also be a call that cannot
emit anything before its result:

- handshake era (``Mcp-Session-Id``): what ``QuietCalls`` requires (a session this gateway knows, whose
  client declared none of elicitation, sampling and roots, without a log level; no task, no progress
  token), and the session open, owned by the caller's principal, not idled out;
- 2026-07-28 (``MCP-Protocol-Version: 2026-07-28``, stateless): a single tools/call without a task, a
  progress token, a log level, ``inputResponses`` or ``requestState``, from a client whose ``_meta``
  capabilities declare none of elicitation, sampling and roots nor the tasks extension, and a principal that
  could open a session.

The SDK server's middleware must be what this path accounts for: the tasks middleware (which passes such calls
on) and the SDK's own OpenTelemetry span, a no-op without a process-wide tracer provider (with one, or with
any other middleware, every call goes to the SDK).

The SDK's behaviour around the call is kept: a handshake-era call holds its session's idle countdown and is
cancelled by the client's ``notifications/cancelled`` (answered "Request cancelled" as the SDK does) or by the
session's DELETE; a 2026-07-28 call is cancelled when the client disconnects, and one that runs past the SDK's
deferral window is answered on an SSE stream with keep-alive pings, as the SDK would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
import pydantic_core

# The SDK's modern entry's own pieces: its Mcp-Param-* check, its JSON and SSE writers, and (read per call, as
# the SDK reads it) its deferral window: a handler that runs that long without a result is answered on an SSE
# stream, with pings.
from mcp.server import _streamable_http_modern as sdk_modern
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server._streamable_http_modern import _SSE_HEADERS, _mcp_param_rejection, _sse_event, _write
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext, authorization_context
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, modern_error_data
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.inbound import (
    MCP_PROTOCOL_VERSION_HEADER,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params, handler_exception_to_error_data
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION
from opentelemetry import trace
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.frontends.mcp.quiet import _replay, quiet_call_message
from gateway.frontends.mcp.tasks import TASKS_EXTENSION
from gateway.upstreams.client_requests import ClientRequestKind

if TYPE_CHECKING:
    from gateway.frontends.mcp import McpFrontend

__all__ = ["LeanCalls"]

log = logging.getLogger("gateway.frontends.mcp")

_ASKING = ("elicitation", "sampling", "roots")  # what a client can be asked mid-call: such clients go to the SDK
_REQUEST_CANCELLED = -32800  # the handshake-era answer to a request the client cancelled (streamable_http.py)
_PING = b": ping\r\n\r\n"


class _Silent:
    """The client of a lean call: it declared nothing it can be asked, and gets no log messages."""

    def declares(self, kind: ClientRequestKind, params: Any) -> bool:
        return False

    def reachable(self) -> bool:
        return False

    async def ask(self, kind: ClientRequestKind, params: Any) -> BaseModel:
        raise RuntimeError("a lean call's client cannot be asked")  # never: it declares nothing

    def log_level(self) -> types.LoggingLevel | None:
        return None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        return None


_SILENT = _Silent()


@dataclass(slots=True)
class _Call:
    """A qualifying tools/call, validated as the SDK would validate it."""

    scope: Scope
    request: Request
    id: types.RequestId
    params: types.CallToolRequestParams
    meta: dict[str, Any]
    version: str
    client_params: types.InitializeRequestParams | None = None
    session_id: str | None = None
    peer: Any = None
    transport: StreamableHTTPServerTransport | None = None
    cancelled: bool = False
    task: asyncio.Task[types.JSONRPCResponse | types.JSONRPCError] | None = field(default=None, repr=False)


class LeanCalls:
    """ASGI middleware before the SDK path: answers qualifying tools/calls itself; ``taken`` counts them."""

    def __init__(self, app: ASGIApp, frontend: McpFrontend) -> None:
        self.app = app
        self.frontend = frontend
        self.taken = 0  # tools/calls answered here (tests read it: a silent fallback to the SDK would show)
        # The SDK's own result shaping (cache hints, the per-version sieve, 2026-07-28's resultType and serverInfo).
        self._runner = ServerRunner(frontend.server, Connection.from_envelope(LATEST_MODERN_VERSION, None, None), None)
        self._running: dict[str, dict[types.RequestId, _Call]] = {}  # handshake-era calls in flight, per session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE" and self._running:
            await self._pass_delete(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] != "POST" or not self._known_middleware():
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        session_id = None if modern else request.headers.get(MCP_SESSION_ID_HEADER)
        if not modern and session_id is None:
            await self.app(scope, receive, send)  # opens a session (or is refused): the SDK's
            return
        first = await receive()
        replay = _replay(first, receive)
        body = first.get("body", b"")
        if first["type"] != "http.request" or first.get("more_body") or not self._small(request, body):
            await self.app(scope, replay, send)
            return
        if modern:
            call = await self._modern_call(scope, request, body)
            if call is None:
                await self.app(scope, replay, send)
                return
            self.taken += 1
            await self._serve_modern(call, scope, receive, send)
            return
        assert session_id is not None
        transport = self._quiet_transport(scope, session_id)
        if transport is None and not self._running.get(session_id):
            await self.app(scope, replay, send)  # not a session whose calls can be answered here: no need to parse
            return
        message = _decode(body, pydantic_core.from_json)
        call = None if transport is None else self._handshake_call(request, session_id, transport, message)
        if call is None:
            if self._running.get(session_id) and isinstance(message, dict) and "id" not in message:
                await self._pass_notification(message, session_id, scope, replay, send)
                return
            await self.app(scope, replay, send)
            return
        self.taken += 1
        await self._serve_handshake(call, scope, receive, send)

    def _known_middleware(self) -> bool:
        """Whether the SDK server's middleware is what this path accounts for: the SDK's OpenTelemetry span, off
        (no process-wide tracer provider), and the tasks middleware, which passes the calls qualifying here on."""
        tasks = self.frontend.tasks._middleware
        return all(m == tasks or (isinstance(m, OpenTelemetryMiddleware) and _sdk_spans_off())
                   for m in self.frontend.server.middleware)

    def _small(self, request: Request, body: bytes) -> bool:
        """Whether the SDK's body limit lets the request through (else it answers 413 itself)."""
        limit = self.frontend.sessions.max_request_body_size
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return False
        return len(body) <= limit

    # --- the handshake era ---------------------------------------------------------------------------------

    def _quiet_transport(self, scope: Scope, session_id: str) -> StreamableHTTPServerTransport | None:
        """The session's transport when it is open, the caller's, and its calls are answered as JSON; else None."""
        sessions = self.frontend.sessions
        transport = sessions._server_instances.get(session_id)
        if transport is None or transport.is_terminated:
            return None
        if transport.idle_scope is not None and transport.idle_scope.cancel_called:
            return None  # the SDK answers that it ended
        if _requestor(scope) != sessions._session_owners.get(session_id):
            return None  # the SDK answers "Session not found"
        return transport if self.frontend._quiet_session(session_id) else None

    def _handshake_call(self, request: Request, session_id: str, transport: StreamableHTTPServerTransport,
                        message: Any) -> _Call | None:
        """The call when the SDK's transport would take it and answer it as JSON (``QuietCalls``), else None."""
        if not quiet_call_message(message) or not _json_post(request) or not check_accept_headers(request)[0]:
            return None
        peer = self.frontend.peer(session_id)
        version = getattr(peer, "protocol_version", None)
        if not isinstance(version, str):
            return None
        try:
            envelope = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValidationError:
            return None
        if not isinstance(envelope, types.JSONRPCRequest):
            return None
        params = _typed_params(version, envelope.params)
        if params is None:
            return None
        return _Call(request.scope, request, envelope.id, params, dict(params.meta or {}), version,
                     client_params=peer.client_params, session_id=session_id, peer=peer, transport=transport)

    async def _serve_handshake(self, call: _Call, scope: Scope, receive: Receive, send: Send) -> None:
        assert call.transport is not None and call.session_id is not None
        running = self._running.setdefault(call.session_id, {})
        key = coerce_request_id(call.id)
        running[key] = call
        try:
            with _holding(call.transport):
                message = await self._run(call, legacy=True)
        finally:
            if running.get(key) is call:
                del running[key]
            if not running:
                self._running.pop(call.session_id, None)
        if call.transport.is_terminated:  # the session ended (DELETE) while the call ran: the SDK's answer
            response = _error_response("Session terminated before the request completed", 500,
                                       types.INTERNAL_ERROR, call.session_id)
        else:
            response = Response(message.model_dump_json(by_alias=True, exclude_unset=True), status_code=200,
                                headers={"Content-Type": "application/json", MCP_SESSION_ID_HEADER: call.session_id})
        await response(scope, receive, send)

    async def _pass_notification(self, message: dict[str, Any], session_id: str, scope: Scope, receive: Receive,
                                 send: Send) -> None:
        """A notification in a session with lean calls in flight: the SDK takes it; a cancel it accepted stops one."""
        status: list[int] = []

        async def watch(sent: Message) -> None:
            if sent["type"] == "http.response.start":
                status.append(sent["status"])
            await send(sent)

        await self.app(scope, receive, watch)
        if status != [202] or message.get("method") != "notifications/cancelled":
            return
        target = cancelled_request_id_from_params(message.get("params"))
        call = self._running.get(session_id, {}).get(coerce_request_id(target)) if target is not None else None
        if call is not None and call.task is not None:
            call.cancelled = True
            call.task.cancel()

    async def _pass_delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A DELETE goes to the SDK; when it ended a session, that session's lean calls end as its handlers do."""
        await self.app(scope, receive, send)
        session_id = Request(scope).headers.get(MCP_SESSION_ID_HEADER)
        for call in list(self._running.get(session_id or "", {}).values()):
            if call.transport is not None and call.transport.is_terminated and call.task is not None:
                call.task.cancel()

    # --- 2026-07-28 ----------------------------------------------------------------------------------------

    async def _modern_call(self, scope: Scope, request: Request, body: bytes) -> _Call | None:
        """The call when the SDK's 2026-07-28 entry would dispatch it and nothing can come before its result."""
        owner = _requestor(scope)
        if owner is not None and self.frontend.sessions.full(owner):
            return None  # ``SessionCap`` answers it (429)
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse) or not _json_post(request):
            return None
        message = _decode(body, json.loads)
        if not isinstance(message, dict) or "id" not in message or message.get("method") != "tools/call":
            return None
        try:
            envelope = types.JSONRPCRequest.model_validate(message)
        except ValidationError:
            return None
        params = envelope.params or {}
        meta = params.get("_meta")
        if any(k in params for k in ("task", "inputResponses", "requestState")) or not isinstance(meta, dict) or any(
                k in meta for k in ("progressToken", "progress_token", types.LOG_LEVEL_META_KEY)):
            return None
        if find_duplicated_routing_header(request.headers.items()) is not None:
            return None
        verdict = classify_inbound_request(message, headers=dict(request.headers))
        if not isinstance(verdict, InboundModernRoute):
            return None
        capabilities = verdict.client_capabilities
        if not isinstance(capabilities, dict) or any(k in capabilities for k in _ASKING):
            return None
        extensions = capabilities.get("extensions")
        if extensions is not None and (not isinstance(extensions, dict) or TASKS_EXTENSION in extensions):
            return None  # a task-aware client: the tasks middleware may answer with a task (tasks.py)
        if await _mcp_param_rejection(self.frontend.server, request, envelope, verdict, None) is not None:
            return None
        typed = _typed_params(verdict.protocol_version, params)
        if typed is None:
            return None
        return _Call(scope, request, envelope.id, typed, dict(typed.meta or {}), verdict.protocol_version)

    async def _serve_modern(self, call: _Call, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer as the SDK's modern entry does: JSON within its deferral window, else SSE with pings."""
        task = asyncio.ensure_future(self._run(call, legacy=False))
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            streaming = False
            while True:
                done, _ = await asyncio.wait({task, gone}, timeout=sdk_modern._SSE_PING_INTERVAL,
                                             return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    message = task.result()
                    if streaming:
                        await send({"type": "http.response.body", "body": _sse_event(message), "more_body": False})
                    else:
                        await _write(message, scope, receive, send)
                    return
                if gone in done:
                    return  # the client left: the call is cancelled, nothing is sent
                if not streaming:
                    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                    streaming = True
                await send({"type": "http.response.body", "body": _PING, "more_body": True})
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # --- both eras -----------------------------------------------------------------------------------------

    async def _run(self, call: _Call, *, legacy: bool) -> types.JSONRPCResponse | types.JSONRPCError:
        """The call's JSON-RPC answer, made as the SDK's handler chain would make it."""
        if legacy:
            call.task = asyncio.ensure_future(self._answer(call, legacy=True))
            try:
                await asyncio.wait({call.task})
            except asyncio.CancelledError:
                call.task.cancel()
                raise
            if call.cancelled or call.task.cancelled():  # the client cancelled it: never answered with a result
                return types.JSONRPCError(jsonrpc="2.0", id=call.id, error=types.ErrorData(
                    code=_REQUEST_CANCELLED, message="Request cancelled"))
            return call.task.result()
        return await self._answer(call, legacy=False)

    async def _answer(self, call: _Call, *, legacy: bool) -> types.JSONRPCResponse | types.JSONRPCError:
        frontend = self.frontend
        try:
            if call.session_id is not None:
                frontend.remember_session(call.session_id, call.peer, call.scope)
            request = await frontend.build_call_request(
                call.scope, call.request.headers, call.params, call.meta,
                client_params=call.client_params, client=_SILENT)
            result = await frontend.answer(request, frontend.gateway.call(request))
            dumped = self._runner._serialize("tools/call", call.version, result)
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:
                if not legacy:
                    error = modern_error_data(exc)  # logs it
                else:  # the SDK's handshake-era dispatcher: code 0 and the exception's text
                    log.exception("handler for 'tools/call' raised")
                    error = types.ErrorData(code=0, message=str(exc))
            return types.JSONRPCError(jsonrpc="2.0", id=call.id, error=error)
        return types.JSONRPCResponse(jsonrpc="2.0", id=call.id, result=dumped)


def _sdk_spans_off() -> bool:
    """Whether the SDK's per-request OpenTelemetry span would record nothing (no process-wide tracer provider)."""
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _requestor(scope: Scope) -> AuthorizationContext | None:
    """The session owner the SDK compares (``RequireIdentity`` put the principal in ``scope["user"]``)."""
    user = scope.get("user")
    return authorization_context(user) if isinstance(user, AuthenticatedUser) else None


def _json_post(request: Request) -> bool:
    """The SDK's two Content-Type checks of a POST (the transport security check and the transport's own)."""
    content_type = request.headers.get("content-type")
    if content_type is None or not content_type.lower().startswith("application/json"):
        return False
    return any(part.strip() == "application/json" for part in content_type.split(";")[0].split(","))


def _decode(body: bytes, parse: Any) -> Any:
    """The body parsed as the SDK's entry parses it; None when it is not JSON (the SDK refuses it)."""
    try:
        return parse(body)
    except (ValueError, RecursionError):
        return None


def _typed_params(version: str, params: dict[str, Any] | None) -> types.CallToolRequestParams | None:
    """The tools/call params validated as the SDK's runner validates them; None where it would refuse them."""
    try:
        _methods.validate_client_request("tools/call", version, params)
        return types.CallToolRequestParams.model_validate({} if params is None else params, by_name=False)
    except (KeyError, ValidationError):
        return None


@contextlib.contextmanager
def _holding(transport: StreamableHTTPServerTransport) -> Iterator[None]:
    """A request in flight on the session, as the SDK's transport counts it: its idle countdown waits."""
    idle, timeout = transport.idle_scope, transport._idle_timeout
    if idle is None or timeout is None:
        yield
        return
    transport._requests_in_flight += 1
    idle.deadline = math.inf
    try:
        yield
    finally:
        transport._requests_in_flight -= 1
        if not transport._requests_in_flight:
            idle.deadline = anyio.current_time() + timeout


def _error_response(message: str, status: int, code: int, session_id: str) -> Response:
    """The SDK transport's error answer (``_create_error_response``)."""
    body = types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message))
    return Response(body.model_dump_json(by_alias=True, exclude_unset=True), status_code=status,
                    headers={"Content-Type": "application/json", MCP_SESSION_ID_HEADER: session_id})


async def _disconnect(receive: Receive) -> None:
    """Returns when the client has gone."""
    while (await receive())["type"] != "http.disconnect":
        pass
