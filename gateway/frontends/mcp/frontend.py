"""The MCP frontend: one streamable-HTTP endpoint at /mcp aggregating every upstream's tools.

Built on the SDK's low-level server. ``McpFrontend`` is the endpoint's one door: it reads each request once and
chooses who answers it, and nobody it chooses calls back into it:

    lean     a tools/call that can carry nothing but its result, when the SDK server's middleware is what the
             lean path accounts for: answered without the SDK's server machinery (``lean.LeanCalls``)
    quiet    a tools/call on a handshake-era session whose client can be asked nothing mid-call: the SDK's
             endpoint, answering it as one JSON body instead of an SSE stream (``quiet.in_json``)
    SDK      everything else: the SDK's endpoint, behind the per-principal session cap (``sessions.SessionCap``)

A notification or a DELETE that the SDK accepted for a session with lean calls in flight is then told to the
lean path (a cancel, the session's end). Whichever answers, a tools/call's ``CallRequest`` and its result come
from the same ``calls.ToolCalls``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import pydantic_core
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.limits import DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, DEFAULT_TASK_TIMEOUT_SECONDS, TOOL_LIST_TTL_MS
from gateway.frontends.identity import identity_of
from gateway.frontends.mcp._sdk import quiet_sdk_span
from gateway.frontends.mcp.calls import CALL_ID_META, ToolCalls
from gateway.frontends.mcp.client_channel import LogLevels, McpClientChannel, covers, elicitation, progress
from gateway.frontends.mcp.input import InputRound, input_round
from gateway.frontends.mcp.input_schema import CallerScope, input_schema_lookup
from gateway.frontends.mcp.lean import LeanCalls, decode
from gateway.frontends.mcp.listen import ToolListeners
from gateway.frontends.mcp.peers import Peers
from gateway.frontends.mcp.quiet import answers_in_json, in_json, quiet_body, quiet_client, replay
from gateway.frontends.mcp.resources import McpItemHandlers, item_views
from gateway.frontends.mcp.round_trips import InputRequired, RoundTrips
from gateway.frontends.mcp.sessions import CappedSessions, SessionCap
from gateway.frontends.mcp.tasks import McpTasks, listed_execution, offers_tasks, with_tasks
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.items import ItemGate
from gateway.pipeline.request import CallOutcome

__all__ = ["CALL_ID_META", "McpFrontend"]

log = logging.getLogger("gateway.frontends.mcp")


class _GatewayServer(Server[Any]):
    """The SDK's server, advertising list_changed for tools, resources and prompts."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> InitializationOptions:
        return with_tasks(super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True, resources_changed=True,
                                                        prompts_changed=True), *args, **kwargs))


class McpFrontend:
    """Owns the MCP server and its session manager for one app instance, and is its endpoint's one door."""

    def __init__(self, gateway: Gateway, *,
                 max_sessions_per_principal: int = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
                 task_timeout: float = DEFAULT_TASK_TIMEOUT_SECONDS, fast_path: bool = True) -> None:
        self.gateway = gateway
        self.calls = ToolCalls(gateway)
        # 2026-07-28 clients hear of tool-list changes on subscriptions/listen streams, each filtered per principal.
        item_gate = ItemGate(gateway, gateway.item_catalog())
        self.listeners = ToolListeners(gateway.visible_tools, visible_items=item_views(item_gate))
        self.peers = Peers(gateway.visible_tools)  # handshake-era sessions, told of list changes
        self.server = _GatewayServer("agent-policy-gateway", version="0.1.0",
                                     on_list_tools=self._list_tools, on_call_tool=self._call_tool,
                                     on_subscriptions_listen=self.listeners,
                                     # 2026-07-28 header check: one registry lookup, not the whole tools/list
                                     get_tool_input_schema=input_schema_lookup(gateway))
        # logging/setLevel: what each handshake-era session wants of the upstreams' log messages.
        self.log_levels = LogLevels()
        self.server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self.log_levels.set_level)
        self.round_trips = RoundTrips()  # upstreams' questions to 2026-07-28 clients, asked through InputRequiredResult
        self.sessions = CappedSessions(self.server, max_sessions_per_principal)
        self.sdk: ASGIApp = SessionCap(StreamableHTTPASGIApp(self.sessions), self.sessions)
        # Qualifying tools/calls answered without the SDK's server machinery (lean.py); off: all go to the SDK.
        self.lean = LeanCalls(self.server, self.sessions, self.peers, self.calls) if fast_path else None
        self.endpoint = CallerScope(self)
        self.tasks = McpTasks(self.server, self.calls, self.call_request, timeout=task_timeout)  # tasks.py
        gateway.on_tools_changed(self.peers.tools_changed)
        McpItemHandlers(item_gate, self.peers.sessions).register(self.server)
        # Listen streams that asked for resource or prompt list changes: after an upstream's change or a reload.
        item_gate.catalog.on_change(self.listeners.items_changed)
        gateway.on_policies_swapped(self.listeners.items_changed)
        gateway.on_tools_changed(self.listeners.changed)
        # A reload can show or hide tools: both eras are told (listen streams only when their list changed).
        gateway.on_policies_swapped(self.peers.tools_changed)
        gateway.on_policies_swapped(self.listeners.changed)

    # --- the door ------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request to /mcp with the strategy it qualifies for: lean, quiet or the SDK."""
        method = scope["method"] if scope["type"] == "http" else None
        if method == "DELETE" and self.lean is not None and self.lean.busy():
            await self.sdk(scope, receive, send)
            self.lean.session_ended(Request(scope).headers.get(MCP_SESSION_ID_HEADER))
            return
        if method != "POST":
            await self.sdk(scope, receive, send)
            return
        request = Request(scope)
        version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        session_id = None if modern else request.headers.get(MCP_SESSION_ID_HEADER)
        lean = self.lean if (modern or session_id is not None) and self._lean_middleware() else None
        quiet = session_id is not None and self.quiet_session(session_id)
        if lean is None and not quiet:  # opens a session, or cannot be answered but on the SDK's stream
            await self.sdk(scope, receive, send)
            return
        first = await receive()
        replayed = replay(first, receive)
        body = first.get("body", b"")
        whole = first["type"] == "http.request" and not first.get("more_body")
        if lean is not None and whole and lean.small(request, body):
            if modern:
                call = await lean.modern_call(scope, request, body)
                if call is not None:
                    await lean.serve_modern(call, scope, receive, send)
                    return
            elif session_id is not None and await self._lean_handshake(lean, request, session_id, quiet, body,
                                                                       receive, replayed, send):
                return
        if quiet and whole and quiet_body(body):
            await in_json(self.sdk, scope, replayed, send)
            return
        await self.sdk(scope, replayed, send)

    async def _lean_handshake(self, lean: LeanCalls, request: Request, session_id: str, quiet: bool, body: bytes,
                              receive: Receive, replayed: Receive, send: Send) -> bool:
        """Whether the lean path answered this handshake-era request, or saw its notification through the SDK."""
        scope = request.scope
        transport = lean.open_transport(scope, session_id) if quiet else None
        running = lean.running_in(session_id)
        if transport is None and not running:
            return False  # not a session whose calls can be answered lean: no need to parse
        message = decode(body, pydantic_core.from_json)
        call = None if transport is None else lean.handshake_call(request, session_id, transport, message)
        if call is not None:
            await lean.serve_handshake(call, scope, receive, send)
            return True
        if not running or not isinstance(message, dict) or "id" in message:
            return False
        if await _status_of(self.sdk, scope, replayed, send) == 202:  # the SDK took the notification
            lean.notified(session_id, message)
        return True

    def _lean_middleware(self) -> bool:
        """Whether the lean path is on and the SDK server's middleware is what it accounts for: the SDK's
        OpenTelemetry span, off (no process-wide tracer provider), and the tasks middleware, which passes the calls
        qualifying there on."""
        if self.lean is None:
            return False
        tasks = self.tasks.middleware
        return all(m == tasks or quiet_sdk_span(m) for m in self.server.middleware)

    def quiet_session(self, session_id: str) -> bool:
        """Whether nothing but results can go on this handshake-era session's tools/call streams (quiet.py)."""
        session = self.peers.get(session_id)
        return session is not None and quiet_client(session) and not self.log_levels.set_for(session_id)

    # --- the SDK's handlers --------------------------------------------------------------------------------

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        identity = identity_of(_http(ctx).scope)
        self._remember(ctx)
        tools = []
        task_client = offers_tasks(ctx)
        # Only the tools this client can use: one that asks the client (tools_need_client) is listed only to
        # clients whose capabilities, as this request declares them, cover what it asks (either era).
        declared = functools.partial(covers, ctx.session.client_capabilities)
        for tool in self.gateway.usable_tools(identity.principal, declared):
            spec = tool.spec
            # Every field of the upstream's definition, under the exposed name.
            tools.append(types.Tool.model_validate({
                "name": tool.name, "title": spec.title, "description": spec.description,
                "inputSchema": spec.input_schema, "annotations": spec.annotations or None,
                "outputSchema": spec.output_schema, "icons": list(spec.icons) or None,
                "execution": listed_execution(spec.execution, task_client), "_meta": spec.meta,
            }))
        # The list is this principal's (policies filter it): never to be shared from a cache across principals.
        return types.ListToolsResult(tools=tools, ttl_ms=TOOL_LIST_TTL_MS, cache_scope="private")

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
        request = await self.call_request(ctx, params)
        # 2026-07-28 clients: an approval asked of the end user (input.py) and an upstream's questions
        # (round_trips.py) both come back as input-required results; the latter carry a requestState.
        asking = input_round(ctx, params)
        run = self.gateway.call if asking is None else _asking(asking, self.gateway)
        return await self.calls.answer(request, self.round_trips.call(run, request, ctx, params,
                                                                      self._log_levels(ctx, dict(params.meta or {}))))

    async def call_request(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams,
                           ) -> CallRequest:
        """The pipeline's request for a tools/call the SDK dispatched."""
        http = _http(ctx)
        self._remember(ctx)
        meta = dict(params.meta or {})
        keep_alive, relay = progress(ctx, meta)
        return await self.calls.build(http.scope, http.headers, params, meta,
                                      client_params=ctx.session.client_params,
                                      client=McpClientChannel(ctx, self._log_levels(ctx, meta)),
                                      progress=keep_alive, upstream_progress=relay, elicit=elicitation(ctx))

    def _log_levels(self, ctx: ServerRequestContext[Any, Any], meta: dict[str, Any]) -> frozenset[str]:
        """The log levels this call relays to its client: none when it is answered as one JSON body."""
        return frozenset() if answers_in_json(_http(ctx).scope) else self.log_levels.allowed(ctx, meta)

    def _remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Keep the caller's session so it can be told when the tool list changes."""
        session_id = _http(ctx).headers.get("mcp-session-id")
        if not session_id:  # no handshake-era session: nothing to send list_changed on
            return
        self.peers.remember(session_id, ctx.session, _http(ctx).scope)


def _asking(asking: InputRound, gateway: Gateway) -> Callable[[CallRequest], Awaitable[CallOutcome]]:
    """The call run through an approval's input-required round; the round's question is raised as ``InputRequired``."""

    async def run(request: CallRequest) -> CallOutcome:
        outcome = await asking.run(gateway, request)
        if isinstance(outcome, types.InputRequiredResult):
            raise InputRequired(outcome)
        return outcome

    return run


def _http(ctx: ServerRequestContext[Any, Any]) -> Request:
    """The HTTP request behind an MCP request; this server is only mounted on HTTP."""
    if ctx.request is None:
        raise MCPError(code=types.INTERNAL_ERROR, message="the gateway serves MCP over HTTP only")
    request: Request = ctx.request
    return request


async def _status_of(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> int | None:
    """Serve the request with ``app``; the status it answered with."""
    status: list[int] = []

    async def watch(sent: Message) -> None:
        if sent["type"] == "http.response.start":
            status.append(sent["status"])
        await send(sent)

    await app(scope, receive, watch)
    return status[0] if len(status) == 1 else None
