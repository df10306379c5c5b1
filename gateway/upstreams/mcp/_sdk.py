"""Every private name of the MCP SDK (``mcp`` 2.3) that the gateway's client side relies on, and nothing else.

The lean ``tools/call`` (``lean.py``) and the upstream task driver (``tasks.py``) do what the SDK's client does,
with the SDK's own code: the session's per-era envelope, its raw request channel, its handlers for what a server
sends on a call's stream, its ``tools/call`` result parsing and the client's input-required driver. None of these
has a public spelling in mcp 2.3, so this module is the only one that reaches them; ``tests/upstreams/mcp/
test_sdk.py`` pins each against a real SDK client and server, so an SDK upgrade that renames or reshapes one fails
there, naming the function below.

The names used, by the function that uses them:

- ``session_hooks``: ``ClientSession._stamp``, ``._dispatcher.send_raw_request``, ``._on_request``,
  ``._on_notify``, ``._call_tool_adapter`` (fixed once ``Client.__aenter__`` has adopted the negotiated era:
  ``ClientSession.adopt`` runs only in the handshake or ``server/discover``).
- ``answer_request``: that ``ClientSession._on_request`` reads nothing of its dispatch context but ``request_id``.
- ``deliver_notification``: that ``ClientSession._on_notify`` reads nothing of its dispatch context.
- ``drive_input_required``: ``Client._drive_input_required``.
- ``clamp_inbound_ttl``, ``later_revision_fields``: ``mcp.client.session._clamp_inbound_ttl`` and
  ``_later_revision_fields``.
- ``otel_span``, ``inject_trace_context``: ``mcp.shared._otel`` (the SDK's tracer, so a lean call's client span is
  the one the SDK's dispatcher would make).

The four module-level functions are the SDK's own objects under our names (no wrapper: the lean path is the
performance path), and a lean connection reads the session's hooks once, when it is made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import mcp_types as types
from mcp import Client, ClientSession
from mcp.client import session as _session
from mcp.shared import _otel
from mcp.shared.dispatcher import CallOptions
from pydantic import TypeAdapter

__all__ = [
    "SessionHooks",
    "answer_request",
    "clamp_inbound_ttl",
    "deliver_notification",
    "drive_input_required",
    "inject_trace_context",
    "later_revision_fields",
    "otel_span",
    "session_hooks",
]

_ResultT = TypeVar("_ResultT")

# Floor a negative ``ttlMs`` in a raw result to 0, in place (what ``ClientSession.send_request`` does first).
clamp_inbound_ttl: Callable[[dict[str, Any]], None] = _session._clamp_inbound_ttl
# The result keys a revision newer than ``version`` declares for ``method`` (dropped from a raw result, as the
# session's ``send_request`` drops them): ``(method, version) -> frozenset[str]``.
later_revision_fields: Callable[[str, str], frozenset[str]] = _session._later_revision_fields
# The SDK's span context manager: ``otel_span(name, *, kind, attributes) -> ContextManager[Span]``.
otel_span = _otel.otel_span
# W3C trace context (traceparent, tracestate) of the current span into a ``_meta`` dict, in place.
inject_trace_context: Callable[[dict[str, Any]], None] = _otel.inject_trace_context

OnRequest = Callable[[Any, str, Mapping[str, Any] | None], Awaitable[dict[str, Any]]]
OnNotify = Callable[[Any, str, Mapping[str, Any] | None], Awaitable[None]]
CallToolAdapter = TypeAdapter[types.CallToolResult | types.InputRequiredResult | types.Result]


@dataclass(frozen=True, slots=True)
class SessionHooks:
    """What the SDK's session does for each request it sends and each message it receives, read once."""

    stamp: Callable[[dict[str, Any], CallOptions], None]  # the era's headers and ``_meta`` onto a request
    send_raw_request: Callable[[str, Mapping[str, Any] | None, CallOptions], Awaitable[dict[str, Any]]]
    on_request: OnRequest  # a server's request answered with the session's callbacks (see ``answer_request``)
    on_notify: OnNotify  # a server's notification to its callbacks (see ``deliver_notification``)
    call_tool_adapter: CallToolAdapter  # ``tools/call`` results: core shapes and the active extensions' claims


def session_hooks(session: ClientSession) -> SessionHooks:
    """The hooks of an entered session (mcp 2.3: ``_stamp``, ``_dispatcher.send_raw_request``, ``_on_request``,
    ``_on_notify``, ``_call_tool_adapter``). Read after ``Client.__aenter__``: ``adopt`` sets the stamp and the
    adapter for the negotiated era, and nothing changes them afterwards."""
    return SessionHooks(
        stamp=session._stamp,
        send_raw_request=session._dispatcher.send_raw_request,
        on_request=cast(OnRequest, session._on_request),
        on_notify=cast(OnNotify, session._on_notify),
        call_tool_adapter=session._call_tool_adapter,
    )


@dataclass(frozen=True, slots=True)
class _Context:
    """What ``ClientSession._on_request`` reads of its dispatch context: the id of the request it answers."""

    request_id: types.RequestId


async def answer_request(hooks: SessionHooks, request_id: types.RequestId, method: str,
                         params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The session's answer to a server's request (sampling, elicitation, roots, ping); raises ``MCPError``.

    Relies on ``_on_request`` reading only ``request_id`` of its dispatch context (mcp 2.3)."""
    return await hooks.on_request(_Context(request_id), method, params)


async def deliver_notification(hooks: SessionHooks, method: str, params: Mapping[str, Any] | None) -> None:
    """A server's notification to the session's callbacks and message handler, as the dispatcher delivers it.

    Relies on ``_on_notify`` reading nothing of its dispatch context (mcp 2.3)."""
    await hooks.on_notify(None, method, params)


async def drive_input_required(client: Client, first: _ResultT | types.InputRequiredResult,
                               retry: Callable[[types.InputResponses | None, str | None],
                                               Awaitable[_ResultT | types.InputRequiredResult]]) -> _ResultT:
    """``first`` when it is final; an ``InputRequiredResult`` answered through the client's callbacks and
    retried until final, as ``Client.call_tool`` does (mcp 2.3: ``Client._drive_input_required``)."""
    return await client._drive_input_required(first, retry)
