"""The one module of the MCP frontend that touches the SDK's private modules and names.

The lean tools/call path (``lean.py``) answers as the SDK's own entry would, with the SDK's own pieces; the
session cap (``sessions.py``) extends the SDK's session manager. Every private name they rely on is reached
here, through a small public function, and tests/frontends/mcp/test_sdk.py pins each one (exists, has the
shape used here, behaves as relied on), so an SDK upgrade that moves one fails in one place, naming it.

What is relied on (``mcp`` 2.3):

- ``mcp.server._streamable_http_modern``: ``_SSE_PING_INTERVAL`` (read per call, as the SDK reads it),
  ``_SSE_HEADERS``, ``_sse_event``, ``_write``, ``_mcp_param_rejection``;
- ``mcp.server._otel.OpenTelemetryMiddleware``, the server's default middleware;
- ``StreamableHTTPSessionManager``: ``_server_instances``, ``_session_owners``, ``_admit_session``;
- ``StreamableHTTPServerTransport``: ``_idle_timeout``, ``_requests_in_flight`` (with the public ``idle_scope``);
- ``ServerRunner._serialize``, the runner's result shaping.

Wrappers on the lean path return the SDK's awaitables rather than awaiting them: no extra coroutine per call.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server import _streamable_http_modern as _modern
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import InboundLadderRejection, InboundModernRoute
from mcp_types.version import LATEST_MODERN_VERSION
from opentelemetry import trace
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

__all__ = ["SSE_HEADERS", "SessionManager", "holding", "param_rejection", "quiet_sdk_span", "result_serializer",
           "sse_event", "sse_ping_interval", "write_answer"]

SSE_HEADERS: Final[list[tuple[bytes, bytes]]] = _modern._SSE_HEADERS
"""The response headers of the SDK's 2026-07-28 entry when it answers on an SSE stream
(``_streamable_http_modern._SSE_HEADERS``)."""


def sse_ping_interval() -> float:
    """The SDK's 2026-07-28 deferral window and ping interval, in seconds, read now as the SDK reads it
    (``_streamable_http_modern._SSE_PING_INTERVAL``, a module float)."""
    interval: float = _modern._SSE_PING_INTERVAL
    return interval


def sse_event(message: types.JSONRPCResponse | types.JSONRPCError) -> bytes:
    """The SDK's SSE ``event: message`` frame of a JSON-RPC answer (``_streamable_http_modern._sse_event``)."""
    frame: bytes = _modern._sse_event(message)
    return frame


def write_answer(message: types.JSONRPCResponse | types.JSONRPCError, scope: Scope, receive: Receive,
                 send: Send) -> Awaitable[None]:
    """The SDK's 2026-07-28 JSON answer, with its status per error code
    (``_streamable_http_modern._write(msg, scope, receive, send)``)."""
    return _modern._write(message, scope, receive, send)  # type: ignore[no-any-return]


def param_rejection(server: Server[Any], request: Request, envelope: types.JSONRPCRequest,
                    verdict: InboundModernRoute) -> Awaitable[InboundLadderRejection | None]:
    """The SDK's ``Mcp-Param-*`` header check of a 2026-07-28 tools/call; None when the headers pass
    (``_streamable_http_modern._mcp_param_rejection(app, request, req, verdict, lifespan_state)``)."""
    return _modern._mcp_param_rejection(server, request, envelope, verdict, None)  # type: ignore[no-any-return]


def quiet_sdk_span(middleware: Any) -> bool:
    """Whether a server middleware is the SDK's own OpenTelemetry span (``mcp.server._otel``), recording nothing
    because no process-wide tracer provider is set."""
    return isinstance(middleware, OpenTelemetryMiddleware) and isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def result_serializer(server: Server[Any]) -> Callable[[str, str, Any], dict[str, Any]]:
    """The SDK runner's result shaping ``(method, version, result) -> wire dict``: cache hints, the per-version
    sieve, 2026-07-28's ``resultType`` and ``serverInfo`` (``ServerRunner._serialize``, bound to a runner that
    serves nothing)."""
    runner = ServerRunner(server, Connection.from_envelope(LATEST_MODERN_VERSION, None, None), None)
    serialize: Callable[[str, str, Any], dict[str, Any]] = runner._serialize
    return serialize


@contextlib.contextmanager
def holding(transport: StreamableHTTPServerTransport) -> Iterator[None]:
    """A request in flight on a session, counted as the SDK's transport counts its own in ``handle_request``:
    its idle countdown waits until the last one ends (``_idle_timeout``, ``_requests_in_flight``, ``idle_scope``)."""
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


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with what the gateway reads of it as public methods and one admission hook.

    It relies on ``_server_instances`` (session id → transport), ``_session_owners`` (session id → the
    credential that opened it) and ``_admit_session(requestor)``, which the SDK calls under its
    session-creation lock to register a new session's transport (None: refused, answered 503).
    """

    def transport(self, session_id: str) -> StreamableHTTPServerTransport | None:
        """The open session's transport, or None."""
        return self._server_instances.get(session_id)

    def owner(self, session_id: str) -> AuthorizationContext | None:
        """The credential that opened the session (None: unknown session, or opened without one)."""
        return self._session_owners.get(session_id)

    def owners(self) -> Iterable[AuthorizationContext]:
        """The credential of every open session."""
        return self._session_owners.values()

    def admits(self, requestor: AuthorizationContext | None) -> bool:
        """Whether a new session may open for ``requestor`` (under the SDK's session-creation lock)."""
        return True

    def admitted(self, transport: StreamableHTTPServerTransport) -> None:
        """A new session's transport, just registered (under the same lock)."""

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        if not self.admits(requestor):
            return None
        transport = super()._admit_session(requestor)
        if transport is not None:
            self.admitted(transport)
        return transport
