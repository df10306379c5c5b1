"""Handshake-era tools/calls that cannot stream anything are answered as one JSON body, not an SSE stream.

The SDK's session transport answers every request of a session on an SSE stream (a writer task, a
memory stream, sse_starlette's response tasks) unless the whole session manager is in JSON mode,
which would take the back channel from every call of every session (no elicitation, no progress,
no log messages, no upstream questions). This makes the choice per request: a tools/call is
answered as JSON when nothing can travel on its stream but the result, that is when

- it is a ``tools/call`` on an existing handshake-era session (``Mcp-Session-Id``), not a task
  (no ``task`` parameter) and without a progress token;
- the session's client declared none of elicitation, sampling and roots (so no approval is asked
  through the client and no upstream question is forwarded), and has not set a log level.

Everything else streams as before. The 2026-07-28 era needs none of this: the SDK answers a
request as JSON there unless it emits something within its deferral window.

How: the SDK reads ``is_json_response_enabled`` on the session's transport while it takes a POST
in, in that request's own task; ``JsonTransport`` makes it a property answering from a context
variable that ``QuietCalls`` sets for a qualifying request. The transport's message router, a task
of its own, reads the default (False), so a message related to a JSON request is not dropped but
queued for it; the call itself is told (``answers_in_json``) so that it sends none: it relays no
log messages even if the session sets a level meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["JsonTransport", "QuietCalls", "answers_in_json", "quiet_call_message", "quiet_client"]

_JSON_KEY = "gateway.mcp_json"
_json: ContextVar[bool] = ContextVar("gateway_mcp_json", default=False)
_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode()
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode()


class JsonTransport(StreamableHTTPServerTransport):
    """The SDK's session transport, answering in JSON exactly the requests ``QuietCalls`` chose."""

    @property  # type: ignore[override]
    def is_json_response_enabled(self) -> bool:
        return _json.get()

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        pass  # the SDK's constructor sets the manager-wide mode (off): the choice is per request here


def answers_in_json(scope: Scope) -> bool:
    """Whether this MCP request is answered as one JSON body (then it must send nothing else)."""
    return bool(scope.get(_JSON_KEY))


def quiet_client(session: Any) -> bool:
    """Whether a handshake-era session's client declared nothing the gateway could ask of it mid-call."""
    params = getattr(session, "client_params", None)
    caps = getattr(params, "capabilities", None)
    if caps is None:
        return False
    return caps.elicitation is None and caps.sampling is None and caps.roots is None


class QuietCalls:
    """ASGI middleware before the MCP endpoint: marks the tools/calls that are answered as JSON."""

    def __init__(self, app: ASGIApp, quiet_session: Callable[[str], bool]) -> None:
        self.app = app
        self.quiet_session = quiet_session  # session id → nothing but the result can go on its calls' streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = _session_id(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if session_id is None or not self.quiet_session(session_id):
            await self.app(scope, receive, send)
            return
        first = await receive()
        replay = _replay(first, receive)
        if first["type"] != "http.request" or first.get("more_body") or not _quiet_call(first.get("body", b"")):
            await self.app(scope, replay, send)
            return
        scope[_JSON_KEY] = True
        token = _json.set(True)
        try:
            await self.app(scope, replay, send)
        finally:
            _json.reset(token)


def _session_id(scope: Scope) -> str | None:
    """The handshake-era session a request names; None for none, or for a request in a later era."""
    headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
    version = headers.get(_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # the SDK serves it statelessly, whatever session id it carries
    return headers.get(_SESSION_HEADER)


def _replay(first: Message, receive: Receive) -> Receive:
    """``receive`` with the message already read handed out again first (the edge sends a body in one)."""
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _quiet_call(body: bytes) -> bool:
    """A single tools/call without a task or a progress token."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return quiet_call_message(message)


def quiet_call_message(message: Any) -> bool:
    """Whether a decoded JSON-RPC message is a single tools/call without a task or a progress token."""
    if not isinstance(message, dict) or message.get("method") != "tools/call" or "id" not in message:
        return False
    params = message.get("params")
    if not isinstance(params, dict) or "task" in params:
        return False
    meta = params.get("_meta")
    return not (isinstance(meta, dict) and ("progressToken" in meta or "progress_token" in meta))
