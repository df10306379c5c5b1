"""The caller's MCP client as an upstream reaches it during a call: its requests (sampling, elicitation,
roots) on the call's own stream, and its log messages at the levels the client asked for.

Log levels: a handshake-era client asks with ``logging/setLevel`` on its session (none asked: no messages);
a 2026-07-28 client asks per request in ``_meta`` (``io.modelcontextprotocol/logLevel``), as the SDK reads it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, get_args

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from gateway.core.limits import MAX_CACHED_SESSIONS
from gateway.pipeline.request import Progress
from gateway.upstreams.base import ToolProgress
from gateway.upstreams.client_requests import ClientRequestKind

__all__ = ["SILENT", "LogLevels", "McpClientChannel", "covers", "elicitation", "progress", "request_of"]

log = logging.getLogger("gateway.frontends.mcp")

_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # least to most severe


class LogLevels:
    """The level each handshake-era MCP session set with ``logging/setLevel``."""

    def __init__(self) -> None:
        self._by_session: OrderedDict[str, str] = OrderedDict()

    async def set_level(self, ctx: ServerRequestContext[Any, Any],
                        params: types.SetLevelRequestParams) -> types.EmptyResult:
        """The ``logging/setLevel`` handler: remember the level for the caller's session."""
        session_id = _session_id(ctx)
        if session_id is not None:
            self._by_session[session_id] = params.level
            self._by_session.move_to_end(session_id)
            while len(self._by_session) > MAX_CACHED_SESSIONS:
                self._by_session.popitem(last=False)
        return types.EmptyResult()

    def set_for(self, session_id: str) -> bool:
        """Whether this handshake-era session set a log level."""
        return session_id in self._by_session

    def allowed(self, ctx: ServerRequestContext[Any, Any], meta: dict[str, Any]) -> frozenset[str]:
        """The levels this request's client may be sent."""
        version = ctx.session.protocol_version
        if version in MODERN_PROTOCOL_VERSIONS:
            return frozenset(allowed_log_levels(version, meta))
        session_id = _session_id(ctx)
        level = self._by_session.get(session_id) if session_id is not None else None
        return frozenset(_LEVELS[_LEVELS.index(level):]) if level in _LEVELS else frozenset()


class McpClientChannel:
    """One MCP call's client, as ``gateway.upstreams.client_requests`` asks it."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], log_levels: frozenset[str]) -> None:
        self._ctx = ctx
        self._log_levels = log_levels

    def declares(self, kind: ClientRequestKind, params: Any) -> bool:
        """Whether the client declared the capability (and sub-capability) the request needs, and can be asked."""
        return self.reachable() and covers(self._ctx.session.client_capabilities, kind, params)

    def reachable(self) -> bool:
        """Whether the call has a stream the client can be asked on (a 2026-07-28 call has none)."""
        return bool(self._ctx.session.can_send_request)

    async def ask(self, kind: ClientRequestKind, params: Any) -> BaseModel:
        """Send the request on the call's own stream and return the client's validated answer."""
        request, result = request_of(kind, params)
        return await self._ctx.session.send_request(
            request, result, metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id))

    def log_level(self) -> types.LoggingLevel | None:
        """The least severe level the client asked log messages for (None: it asked for none)."""
        for level in get_args(types.LoggingLevel):
            if level in self._log_levels:
                return level  # type: ignore[no-any-return]
        return None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Relay a log message on the call's stream when its level is one the client asked for."""
        if params.level not in self._log_levels:
            return
        await self._ctx.session.send_notification(types.LoggingMessageNotification(params=params),
                                                  related_request_id=self._ctx.request_id)


class _Silent:
    """The client of a lean call (lean.py): it declared nothing it can be asked, and gets no log messages."""

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


SILENT = _Silent()

_ELICIT = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_APPROVE_SCHEMA = {"type": "object", "properties": {"approve": {"type": "boolean", "title": "Approve this call?",
                                                                "default": True}}}


def elicitation(ctx: ServerRequestContext[Any, Any]) -> Any:
    """Ask the end user through their client, when it declared elicitation (else None); None answer = cannot ask."""
    try:
        if not ctx.session.check_client_capability(_ELICIT):
            return None
    except Exception as exc:  # e.g. a client in the stateless protocol era: no way to ask
        log.info("elicitation not possible: %s", exc)
        return None

    async def ask(message: str) -> bool | None:
        try:
            result = await ctx.session.elicit_form(message=message, requested_schema=_APPROVE_SCHEMA,
                                                   related_request_id=ctx.request_id)
        except Exception as exc:  # e.g. a client in the stateless protocol era: fall back to the page
            log.info("elicitation not possible: %s", exc)
            return None
        if result.action == "cancel":
            return None  # dismissed without an answer: the call waits for an approver instead
        if result.action != "accept":
            return False
        return bool((result.content or {}).get("approve", True))

    return ask


def progress(ctx: ServerRequestContext[Any, Any], meta: dict[str, Any]) -> tuple[Progress | None, ToolProgress | None]:
    """The call's approval keep-alives and the relay of its upstream's progress, when the client gave a token."""
    if meta.get("progress_token") is None and meta.get("progressToken") is None:
        return None, None
    counter = {"n": 0}

    async def report(message: str) -> None:
        counter["n"] += 1
        await ctx.session.report_progress(counter["n"], None, message)

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        # Shifted past the keep-alives sent while the call was held: a token's progress must only increase.
        base = counter["n"]
        try:
            await ctx.session.report_progress(base + progress, None if total is None else base + total, message)
        except Exception as exc:  # the client went away: the call itself goes on
            log.info("progress not relayed: %s", exc)

    return report, relay


def covers(caps: types.ClientCapabilities | None, kind: ClientRequestKind, params: Any) -> bool:
    """Whether declared capabilities ``caps`` cover what a request of ``kind`` with ``params`` needs."""
    if caps is None:
        return False
    if kind == "sampling":
        if caps.sampling is None:
            return False
        wants_tools = params.tools is not None or params.tool_choice is not None
        wants_context = params.include_context not in (None, "none")
        return (caps.sampling.tools is not None or not wants_tools) and \
            (caps.sampling.context is not None or not wants_context)
    if kind == "elicitation":
        if caps.elicitation is None:
            return False
        if isinstance(params, types.ElicitRequestURLParams):
            return caps.elicitation.url is not None
        # An empty elicitation capability means form mode (the spec's backwards compatibility).
        return caps.elicitation.form is not None or caps.elicitation.url is None
    return caps.roots is not None


def request_of(kind: ClientRequestKind, params: Any) -> tuple[Any, type[BaseModel]]:
    """The MCP request for an upstream's request of ``kind``, and the type its answer must have."""
    if kind == "sampling":
        wants_tools = params.tools is not None or params.tool_choice is not None
        return (types.CreateMessageRequest(params=params),
                types.CreateMessageResultWithTools if wants_tools else types.CreateMessageResult)
    if kind == "elicitation":
        return types.ElicitRequest(params=params), types.ElicitResult
    return types.ListRootsRequest(), types.ListRootsResult


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    request = ctx.request
    return request.headers.get("mcp-session-id") if request is not None else None
