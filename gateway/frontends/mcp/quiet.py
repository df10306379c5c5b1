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
variable that ``in_json`` sets for a request the frontend chose to answer so
(``McpFrontend.__call__``). The transport's message router, a task
of its own, reads the default (False), so a message related to a JSON request is not dropped but
queued for it; the call itself is told (``answers_in_json``) so that it sends none: it relays no
log messages even if the session sets a level meanwhile.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

from mcp.server.streamable_http import StreamableHTTPServerTransport
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["JsonTransport", "answers_in_json", "in_json", "quiet_body", "quiet_call_message", "quiet_client", "replay"]

_JSON_KEY = "gateway.mcp_json"
_json: ContextVar[bool] = ContextVar("gateway_mcp_json", default=False)


class JsonTransport(StreamableHTTPServerTransport):
    """The SDK's session transport, answering in JSON exactly the requests ``in_json`` serves."""

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


async def in_json(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve a request chosen for a JSON answer (``quiet_body``, on a session ``quiet_client``) with ``app``,
    the SDK's endpoint: its session transport (``JsonTransport``) answers it as one JSON body."""
    scope[_JSON_KEY] = True
    token = _json.set(True)
    try:
        await app(scope, receive, send)
    finally:
        _json.reset(token)


def replay(first: Message, receive: Receive) -> Receive:
    """``receive`` with the message already read handed out again first (the edge sends a body in one)."""
    pending = [first]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def quiet_body(body: bytes) -> bool:
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
