"""The lean tools/call path: a qualifying call answered here, without the SDK's server and transport machinery.

Through the SDK a tools/call crosses a session transport (memory streams, a message router, a writer task),
the JSON-RPC dispatcher (a task per request, cancel scopes) and the server runner; in the 2026-07-28 era a
task group, a memory stream and two tasks per request. For a call that can carry nothing but its result,
``LeanCalls`` is the strategy the frontend (``McpFrontend.__call__``, the one door of /mcp) chooses for it:
it builds the pipeline's ``CallRequest`` with the same ``ToolCalls`` as the SDK's handler, runs
``Gateway.call``, shapes the result with ``ToolCalls.answer`` and the SDK's own result serialiser, and writes
the one ``application/json`` response the SDK would have written, byte for byte. It never calls the SDK's
endpoint: whatever it does not take, the frontend gives to the SDK.

A request qualifies only when every check the SDK would make first passes, using the SDK's own functions
(Accept, Content-Type, body size, JSON-RPC envelope, params validation, and for 2026-07-28 the routing
headers, the ``_meta`` envelope and the ``Mcp-Param-*`` headers); anything else, hostile input included,
goes on to the SDK path unchanged, so every refusal is the SDK's own. It must also be a call that cannot
emit anything before its result:

- handshake era (``Mcp-Session-Id``): what a JSON answer requires (quiet.py) (a session this gateway knows, whose
  client declared none of elicitation, sampling and roots, without a log level; no task, no progress
  token), and the session open, owned by the caller's principal, not idled out;
- 2026-07-28 (``MCP-Protocol-Version: 2026-07-28``, stateless): a single tools/call without a task, a
  progress token, a log level, ``inputResponses`` or ``requestState``, from a client whose ``_meta``
  capabilities declare none of elicitation, sampling and roots nor the tasks extension, and a principal that
  could open a session.

The SDK server's middleware must be what this path accounts for (the frontend checks): the tasks middleware
(which passes such calls on) and the SDK's own OpenTelemetry span, a no-op without a process-wide tracer
provider (with one, or with any other middleware, every call goes to the SDK).

The SDK's behaviour around the call is kept: a handshake-era call holds its session's idle countdown and is
cancelled by the client's ``notifications/cancelled`` (answered "Request cancelled" as the SDK does) or by the
session's DELETE; a 2026-07-28 call is cancelled when the client disconnects, and one that runs past the SDK's
deferral window is answered on an SSE stream with keep-alive pings, as the SDK would.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext, authorization_context
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport, check_accept_headers
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request, find_duplicated_routing_header
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params, handler_exception_to_error_data
from mcp_types import methods as _methods
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.frontends.mcp import _sdk
from gateway.frontends.mcp.calls import ToolCalls
from gateway.frontends.mcp.client_channel import SILENT
from gateway.frontends.mcp.peers import Peers
from gateway.frontends.mcp.quiet import quiet_call_message
from gateway.frontends.mcp.sessions import CappedSessions
from gateway.frontends.mcp.tasks import TASKS_EXTENSION

__all__ = ["LeanCalls", "decode"]

log = logging.getLogger("gateway.frontends.mcp")

_ASKING = ("elicitation", "sampling", "roots")  # what a client can be asked mid-call: such clients go to the SDK
_REQUEST_CANCELLED = -32800  # the handshake-era answer to a request the client cancelled (streamable_http.py)
_PING = b": ping\r\n\r\n"


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
    """The lean strategy: qualifies a tools/call and answers it; ``taken`` counts the calls it answered."""

    def __init__(self, server: Server[Any], sessions: CappedSessions, peers: Peers, calls: ToolCalls) -> None:
        self.taken = 0  # tools/calls answered here (tests read it: a silent fallback to the SDK would show)
        self._server = server
        self._sessions = sessions
        self._peers = peers
        self._calls = calls
        # The SDK's own result shaping (cache hints, the per-version sieve, 2026-07-28's resultType and serverInfo).
        self._serialize = _sdk.result_serializer(server)
        self._running: dict[str, dict[types.RequestId, _Call]] = {}  # handshake-era calls in flight, per session

    def busy(self) -> bool:
        """Whether any handshake-era call is in flight here."""
        return bool(self._running)

    def running_in(self, session_id: str) -> bool:
        """Whether a call of this handshake-era session is in flight here."""
        return bool(self._running.get(session_id))

    def small(self, request: Request, body: bytes) -> bool:
        """Whether the SDK's body limit lets the request through (else it answers 413 itself)."""
        limit = self._sessions.max_request_body_size
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return False
        return len(body) <= limit

    # --- the handshake era ---------------------------------------------------------------------------------

    def open_transport(self, scope: Scope, session_id: str) -> StreamableHTTPServerTransport | None:
        """The session's transport when it is open and the caller's (the SDK would take the request); else None."""
        transport = self._sessions.transport(session_id)
        if transport is None or transport.is_terminated:
            return None
        if transport.idle_scope is not None and transport.idle_scope.cancel_called:
            return None  # the SDK answers that it ended
        if _requestor(scope) != self._sessions.owner(session_id):
            return None  # the SDK answers "Session not found"
        return transport

    def handshake_call(self, request: Request, session_id: str, transport: StreamableHTTPServerTransport,
                       message: Any) -> _Call | None:
        """The call when the SDK's transport would take it and answer it as JSON (quiet.py), else None."""
        if not quiet_call_message(message) or not _json_post(request) or not check_accept_headers(request)[0]:
            return None
        peer = self._peers.get(session_id)
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

    async def serve_handshake(self, call: _Call, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a handshake-era call as the SDK's transport answers it in JSON mode."""
        assert call.transport is not None and call.session_id is not None
        self.taken += 1
        running = self._running.setdefault(call.session_id, {})
        key = coerce_request_id(call.id)
        running[key] = call
        try:
            with _sdk.holding(call.transport):
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

    def notified(self, session_id: str, message: dict[str, Any]) -> None:
        """A notification the SDK accepted (202) in a session with calls in flight here: a cancel stops one."""
        if message.get("method") != "notifications/cancelled":
            return
        target = cancelled_request_id_from_params(message.get("params"))
        call = self._running.get(session_id, {}).get(coerce_request_id(target)) if target is not None else None
        if call is not None and call.task is not None:
            call.cancelled = True
            call.task.cancel()

    def session_ended(self, session_id: str | None) -> None:
        """After a DELETE the SDK served: when it ended the session, its calls here end as its handlers do."""
        for call in list(self._running.get(session_id or "", {}).values()):
            if call.transport is not None and call.transport.is_terminated and call.task is not None:
                call.task.cancel()

    # --- 2026-07-28 ----------------------------------------------------------------------------------------

    async def modern_call(self, scope: Scope, request: Request, body: bytes) -> _Call | None:
        """The call when the SDK's 2026-07-28 entry would dispatch it and nothing can come before its result."""
        owner = _requestor(scope)
        if owner is not None and self._sessions.full(owner):
            return None  # ``SessionCap`` answers it (429)
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse) or not _json_post(request):
            return None
        message = decode(body, json.loads)
        if not isinstance(message, dict) or "id" not in message or message.get("method") != "tools/call":
            return None
        try:
            envelope = types.JSONRPCRequest.model_validate(message)
        except ValidationError:
            return None
        params = envelope.params or {}
        if not _plain_params(params):
            return None
        if find_duplicated_routing_header(request.headers.items()) is not None:
            return None
        verdict = classify_inbound_request(message, headers=dict(request.headers))
        if not isinstance(verdict, InboundModernRoute) or not _plain_client(verdict.client_capabilities):
            return None
        if await _sdk.param_rejection(self._server, request, envelope, verdict) is not None:
            return None
        typed = _typed_params(verdict.protocol_version, params)
        if typed is None:
            return None
        return _Call(scope, request, envelope.id, typed, dict(typed.meta or {}), verdict.protocol_version)

    async def serve_modern(self, call: _Call, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer as the SDK's modern entry does: JSON within its deferral window, else SSE with pings."""
        self.taken += 1
        task = asyncio.ensure_future(self._run(call, legacy=False))
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            streaming = False
            while True:
                done, _ = await asyncio.wait({task, gone}, timeout=_sdk.sse_ping_interval(),
                                             return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    message = task.result()
                    if streaming:
                        await send({"type": "http.response.body", "body": _sdk.sse_event(message),
                                    "more_body": False})
                    else:
                        await _sdk.write_answer(message, scope, receive, send)
                    return
                if gone in done:
                    return  # the client left: the call is cancelled, nothing is sent
                if not streaming:
                    await send({"type": "http.response.start", "status": 200, "headers": _sdk.SSE_HEADERS})
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
        calls = self._calls
        try:
            if call.session_id is not None:
                self._peers.remember(call.session_id, call.peer, call.scope)
            request = await calls.build(call.scope, call.request.headers, call.params, call.meta,
                                        client_params=call.client_params, client=SILENT)
            result = await calls.answer(request, calls.gateway.call(request))
            dumped = self._serialize("tools/call", call.version, result)
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


def _plain_params(params: dict[str, Any]) -> bool:
    """No task, no input responses or request state, and a ``_meta`` without a progress token or a log level."""
    meta = params.get("_meta")
    if any(k in params for k in ("task", "inputResponses", "requestState")) or not isinstance(meta, dict):
        return False
    return not any(k in meta for k in ("progressToken", "progress_token", types.LOG_LEVEL_META_KEY))


def _plain_client(capabilities: Any) -> bool:
    """A 2026-07-28 client that declared nothing it can be asked, nor the tasks extension (tasks.py may answer
    such a client with a task)."""
    if not isinstance(capabilities, dict) or any(k in capabilities for k in _ASKING):
        return False
    extensions = capabilities.get("extensions")
    return extensions is None or (isinstance(extensions, dict) and TASKS_EXTENSION not in extensions)


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


def decode(body: bytes, parse: Any) -> Any:
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


def _error_response(message: str, status: int, code: int, session_id: str) -> Response:
    """The SDK transport's error answer (``_create_error_response``)."""
    body = types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message))
    return Response(body.model_dump_json(by_alias=True, exclude_unset=True), status_code=status,
                    headers={"Content-Type": "application/json", MCP_SESSION_ID_HEADER: session_id})


async def _disconnect(receive: Receive) -> None:
    """Returns when the client has gone."""
    while (await receive())["type"] != "http.disconnect":
        pass
