"""The MCP frontend: one streamable-HTTP endpoint at /mcp aggregating every upstream's tools.

Built on the SDK's low-level server. A tool's failure or refusal is a result with ``isError``
that the model reads; a tool that is not exposed is a protocol error (-32602) naming only the
requested name. Unexpected failures become an ``isError`` result, never a crash or a leak.
"""

from __future__ import annotations

import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jsonschema
import mcp_types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.requests import Request
from starlette.types import Scope

from gateway.core.errors import UnknownToolError
from gateway.core.limits import (
    DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    DEFAULT_TASK_TIMEOUT_SECONDS,
    MAX_CACHED_SESSIONS,
    TOOL_LIST_TTL_MS,
)
from gateway.frontends.identity import identity_of
from gateway.frontends.mcp.client_channel import LogLevels, McpClientChannel, covers
from gateway.frontends.mcp.input import InputRound, input_round
from gateway.frontends.mcp.input_schema import CallerScope, input_schema_lookup
from gateway.frontends.mcp.lean import LeanCalls
from gateway.frontends.mcp.listen import SessionViews, ToolListeners
from gateway.frontends.mcp.quiet import QuietCalls, answers_in_json, quiet_client
from gateway.frontends.mcp.resources import McpItemHandlers, item_views
from gateway.frontends.mcp.round_trips import InputRequired, RoundTrips
from gateway.frontends.mcp.sessions import CappedSessions, SessionCap
from gateway.frontends.mcp.tasks import McpTasks, listed_execution, offers_tasks, with_tasks
from gateway.observe.tracing import client_traceparent
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.items import ItemGate
from gateway.pipeline.request import CallOutcome, Progress, call_id_of, gave_call_id, iteration_of
from gateway.pipeline.runs import (
    CLIENT_INFO_META,
    MCP_SESSION_HEADER,
    client_of,
    explicit_run_id,
    resolve_run,
)
from gateway.upstreams.base import ToolProgress
from gateway.upstreams.client_requests import ClientChannel
from gateway.upstreams.items import ItemCatalog

__all__ = ["CALL_ID_META", "McpFrontend"]

log = logging.getLogger("gateway.frontends.mcp")

# A client may name its call in the request's `_meta` so a retry is recognised as the same call.
CALL_ID_META = "gateway/call_id"
ITERATION_META = "gateway/iteration"


class _GatewayServer(Server[Any]):
    """The SDK's server, advertising list_changed for tools, resources and prompts."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> InitializationOptions:
        return with_tasks(super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True, resources_changed=True,
                                                        prompts_changed=True), *args, **kwargs))


class McpFrontend:
    """Owns the MCP server and its session manager for one app instance."""

    def __init__(self, gateway: Gateway, *,
                 max_sessions_per_principal: int = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
                 task_timeout: float = DEFAULT_TASK_TIMEOUT_SECONDS, fast_path: bool = True) -> None:
        self.gateway = gateway
        # 2026-07-28 clients hear of tool-list changes on subscriptions/listen streams, each filtered per principal.
        item_gate = ItemGate(gateway, ItemCatalog(gateway.registry))
        self.listeners = ToolListeners(gateway.visible_tools, visible_items=item_views(item_gate))
        self._views = SessionViews(gateway.visible_tools)  # handshake-era sessions: told only of their own list
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
        sdk_path = QuietCalls(SessionCap(StreamableHTTPASGIApp(self.sessions), self.sessions), self._quiet_session)
        # Qualifying tools/calls answered without the SDK's server machinery (lean.py); off: all go to the SDK.
        self.lean = LeanCalls(sdk_path, self) if fast_path else None
        self.endpoint = CallerScope(self.lean or sdk_path)
        self.tasks = McpTasks(self, timeout=task_timeout)  # tools/call as a task, tasks/* (tasks.py)
        # MCP session id → its latest request's ServerSession. The SDK builds a ServerSession per
        # request, so a weak reference dies with the request; a kept one can still notify over the
        # connection's standalone stream after its request ended.
        self._peers: OrderedDict[str, Any] = OrderedDict()
        gateway.registry.on_change(self._tools_changed)
        McpItemHandlers(item_gate, self._peers).register(self.server)
        # Listen streams that asked for resource or prompt list changes: after an upstream's change or a reload.
        item_gate.catalog.on_change(self.listeners.items_changed)
        gateway.policies.swap_listeners.append(self.listeners.items_changed)
        gateway.registry.on_change(self.listeners.changed)
        # A reload can show or hide tools: both eras are told (listen streams only when their list changed).
        gateway.policies.swap_listeners.extend([self._tools_changed, self.listeners.changed])

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
        return await self.answer(request, self.round_trips.call(run, request, ctx, params,
                                                                self._log_levels(ctx, dict(params.meta or {}))))

    async def answer(self, request: CallRequest,
                     running: Awaitable[CallOutcome]) -> types.CallToolResult | types.InputRequiredResult:
        """The MCP result of a running call; a protocol error (``MCPError``) is raised for the client."""
        try:
            outcome = await running
        except InputRequired as asked:
            return asked.result
        except MCPError:  # a protocol error for the client (an invalid requestState)
            raise
        except UnknownToolError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except Exception:
            log.exception("call %s to %s failed inside the gateway", request.call_id, request.tool)
            return types.CallToolResult(content=[types.TextContent(type="text", text="The gateway failed.")],
                                        is_error=True)
        return self.tool_result(request.tool, outcome)

    async def call_request(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams,
                           ) -> CallRequest:
        """The pipeline's request for an MCP tools/call."""
        http = _http(ctx)
        self._remember(ctx)
        meta = dict(params.meta or {})
        keep_alive, relay = _progress(ctx, meta)
        return await self.build_call_request(http.scope, http.headers, params, meta,
                                             client_params=ctx.session.client_params,
                                             client=McpClientChannel(ctx, self._log_levels(ctx, meta)),
                                             progress=keep_alive, upstream_progress=relay, elicit=_elicitation(ctx))

    async def build_call_request(self, scope: Scope, headers: Mapping[str, str], params: types.CallToolRequestParams,
                                 meta: dict[str, Any], *, client_params: types.InitializeRequestParams | None,
                                 client: ClientChannel | None,
                                 progress: Progress | None = None, upstream_progress: ToolProgress | None = None,
                                 elicit: Any = None) -> CallRequest:
        """The pipeline's request for a tools/call, from the SDK path (``call_request``) or the lean one."""
        identity = identity_of(scope)
        run = await resolve_run(self.gateway.store, identity.principal.id, explicit_run_id(headers, meta),
                                client_of(client_info_of(client_params, meta), headers),
                                headers.get(MCP_SESSION_HEADER) or None)
        return CallRequest(
            tool=params.name,
            arguments=dict(params.arguments or {}),
            principal=identity.principal,
            session_id=run.id,
            run_client=run.client,
            call_id=call_id_of(meta.get(CALL_ID_META)),
            call_id_given=gave_call_id(meta.get(CALL_ID_META)),
            iteration=iteration_of(meta.get(ITERATION_META)),
            progress=progress,
            upstream_progress=upstream_progress,
            frontend="mcp",
            elicit=elicit,
            client=client,
            traceparent=client_traceparent(meta.get("traceparent"), headers.get("traceparent")),
        )

    def tool_result(self, name: str, outcome: CallOutcome) -> types.CallToolResult:
        """The MCP result of a call's outcome."""
        structured = outcome.structured if isinstance(outcome.structured, dict) else None
        is_error = outcome.is_error
        exposed = self.gateway.registry.get(name)
        schema = exposed.spec.output_schema if exposed is not None else None
        if not is_error and schema is not None and not _fits(schema, structured):
            # MCP requires a non-error result of a tool with an outputSchema to carry conforming structured
            # content (the SDK client raises otherwise). A result the gateway made (skip, pending) or rewrote
            # that does not fit goes as an error result with the same text, which clients do not validate.
            log.info("call %s: the result does not fit %s's outputSchema; sent as isError", outcome.call_id, name)
            structured, is_error = None, True
        return types.CallToolResult.model_validate({
            "content": outcome.content, "structuredContent": structured, "isError": is_error,
            "_meta": outcome.meta,
        })

    def _log_levels(self, ctx: ServerRequestContext[Any, Any], meta: dict[str, Any]) -> frozenset[str]:
        """The log levels this call relays to its client: none when it is answered as one JSON body."""
        return frozenset() if answers_in_json(_http(ctx).scope) else self.log_levels.allowed(ctx, meta)

    def _quiet_session(self, session_id: str) -> bool:
        """Whether nothing but results can go on this handshake-era session's tools/call streams (quiet.py)."""
        session = self._peers.get(session_id)
        return session is not None and quiet_client(session) and not self.log_levels.set_for(session_id)

    def _remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Keep the caller's session so it can be told when the tool list changes."""
        session_id = _http(ctx).headers.get("mcp-session-id")
        if not session_id:  # no handshake-era session: nothing to send list_changed on
            return
        self.remember_session(session_id, ctx.session, _http(ctx).scope)

    def peer(self, session_id: str) -> Any:
        """The handshake-era session last seen with this id (its ServerSession), or None."""
        return self._peers.get(session_id)

    def remember_session(self, session_id: str, session: Any, scope: Scope) -> None:
        """Keep ``session`` as the one to tell of tool-list changes, for the caller in ``scope``."""
        self._peers[session_id] = session
        self._peers.move_to_end(session_id)
        self._views.remember(session_id, identity_of(scope).principal)
        while len(self._peers) > MAX_CACHED_SESSIONS:
            self._peers.popitem(last=False)

    def _tools_changed(self) -> None:
        peers = dict(self._peers)
        for session_id in self._views.changed(peers):
            _spawn(self._notify(session_id, peers[session_id]))

    async def _notify(self, session_id: str, session: Any) -> None:
        try:
            await session.send_tool_list_changed()
        except Exception:  # the client went away; forget it
            if self._peers.get(session_id) is session:
                del self._peers[session_id]


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



def client_info_of(client_params: types.InitializeRequestParams | None, meta: dict[str, Any]) -> Any:
    """The client's clientInfo: from the MCP session's initialize, or this request's 2026-07-28 ``_meta``."""
    if client_params is not None:
        return client_params.client_info
    return meta.get(CLIENT_INFO_META)


_tasks: set[Any] = set()


def _spawn(coro: Any) -> None:
    import asyncio

    task = asyncio.ensure_future(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


_ELICIT = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_APPROVE_SCHEMA = {"type": "object", "properties": {"approve": {"type": "boolean", "title": "Approve this call?",
                                                                "default": True}}}


def _elicitation(ctx: ServerRequestContext[Any, Any]) -> Any:
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


def _progress(ctx: ServerRequestContext[Any, Any], meta: dict[str, Any]) -> tuple[Progress | None, ToolProgress | None]:
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


@functools.lru_cache(maxsize=256)
def _output_validator(schema: str) -> Any:
    parsed = json.loads(schema)
    cls = jsonschema.validators.validator_for(parsed)
    cls.check_schema(parsed)
    return cls(parsed)


def _fits(schema: dict[str, Any], structured: Any) -> bool:
    """Whether ``structured`` is content a client validating against ``schema`` accepts."""
    if structured is None:
        return False
    try:
        validator = _output_validator(json.dumps(schema, sort_keys=True))
    except (jsonschema.SchemaError, TypeError, ValueError):  # an invalid schema: nothing can fit; relay as is
        return True
    return bool(validator.is_valid(structured))
