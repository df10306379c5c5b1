"""The MCP frontend's resources and prompts: lists per principal, reads and gets through ``ItemGate``.

An unknown or hidden resource or prompt is a protocol error (-32602, "Unknown resource: <uri>"), the
same for both; a request the policies refuse, or a URI with two readings, is a protocol error with
``REFUSED`` and the reason, which the client shows. Subscriptions (handshake era) are kept per MCP
session, and the upstream's ``notifications/resources/updated`` go to the sessions subscribed to that
URI; an unsubscribe always succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext

from gateway.core.errors import ItemRefusedError, UnknownItemError
from gateway.core.limits import MAX_CACHED_SESSIONS
from gateway.frontends.identity import identity_of
from gateway.pipeline.items import ItemGate, ItemRequest
from gateway.policy.call import Principal

__all__ = ["REFUSED", "McpItemHandlers", "item_views"]

log = logging.getLogger("gateway.frontends.mcp")

# The JSON-RPC error code of a read or get the policies refused (implementation-defined server error range).
REFUSED = -32003


class McpItemHandlers:
    """Registers the resources/* and prompts/* handlers on the SDK server and relays resource updates."""

    def __init__(self, gate: ItemGate, peers: Callable[[], Iterable[Any]]) -> None:
        """``peers``: the handshake-era sessions known now, told when the lists change."""
        self.gate = gate
        self._peers = peers
        # gateway URI → MCP session id → that session (the latest request's), for resources/updated.
        self._subscribed: dict[str, OrderedDict[str, Any]] = {}
        self._background: set[asyncio.Task[None]] = set()
        gate.catalog.on_updated(self._updated)
        gate.catalog.on_change(self._changed)

    def register(self, server: Server[Any]) -> None:
        """Serve resources and prompts on ``server`` (its capabilities follow from the handlers)."""
        server.add_request_handler("resources/list", types.PaginatedRequestParams, self._list_resources)
        server.add_request_handler("resources/templates/list", types.PaginatedRequestParams, self._list_templates)
        server.add_request_handler("resources/read", types.ReadResourceRequestParams, self._read)
        server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, self._subscribe)
        server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, self._unsubscribe)
        server.add_request_handler("prompts/list", types.PaginatedRequestParams, self._list_prompts)
        server.add_request_handler("prompts/get", types.GetPromptRequestParams, self._get_prompt)

    async def _list_resources(self, ctx: ServerRequestContext[Any, Any],
                              params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        items = self.gate.visible(_principal(ctx), self.gate.catalog.resources())
        return types.ListResourcesResult(resources=[types.Resource.model_validate(i.definition) for i in items])

    async def _list_templates(self, ctx: ServerRequestContext[Any, Any],
                              params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        items = self.gate.visible(_principal(ctx), self.gate.catalog.templates())
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate.model_validate(i.definition) for i in items])

    async def _list_prompts(self, ctx: ServerRequestContext[Any, Any],
                            params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        items = self.gate.visible(_principal(ctx), self.gate.catalog.prompts())
        return types.ListPromptsResult(prompts=[types.Prompt.model_validate(i.definition) for i in items])

    async def _read(self, ctx: ServerRequestContext[Any, Any],
                    params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        request = ItemRequest("resources/read", str(params.uri), _principal(ctx))
        with _as_protocol_errors():
            return await self.gate.read(request)

    async def _get_prompt(self, ctx: ServerRequestContext[Any, Any],
                          params: types.GetPromptRequestParams) -> types.GetPromptResult:
        request = ItemRequest("prompts/get", params.name, _principal(ctx), dict(params.arguments or {}))
        with _as_protocol_errors():
            return await self.gate.get(request)

    async def _subscribe(self, ctx: ServerRequestContext[Any, Any],
                         params: types.SubscribeRequestParams) -> types.EmptyResult:
        request = ItemRequest("resources/subscribe", str(params.uri), _principal(ctx))
        with _as_protocol_errors():
            item = await self.gate.subscribe(request)
        session_id = _session_id(ctx)
        if session_id is not None:  # (the handshake era always has one: subscribing needs a session)
            sessions = self._subscribed.setdefault(item.info.name, OrderedDict())  # the URI updates name
            sessions[session_id] = ctx.session
            while len(sessions) > MAX_CACHED_SESSIONS:
                sessions.popitem(last=False)
        return types.EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext[Any, Any],
                           params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        """Always an empty result: whether the URI exists, is hidden or was subscribed to is not told."""
        item = self.gate.subscription(str(params.uri))
        sessions = self._subscribed.get(item.info.name) if item is not None else None
        if item is not None and sessions is not None and sessions.pop(_session_id(ctx) or "", None) is not None:
            if not sessions:  # the last subscriber gone: the upstream can stop sending updates
                del self._subscribed[item.info.name]
                await self.gate.unsubscribe(item)
        return types.EmptyResult()

    def _updated(self, uri: str) -> None:
        for session_id, session in list(self._subscribed.get(uri, {}).items()):
            self._spawn(self._notify(uri, session_id, session))

    def _changed(self) -> None:
        for session in self._peers():
            self._spawn(_list_changed(session))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _notify(self, uri: str, session_id: str, session: Any) -> None:
        try:
            await session.send_resource_updated(uri)
        except Exception:  # the client went away; forget its subscription
            sessions = self._subscribed.get(uri)
            if sessions is not None and sessions.get(session_id) is session:
                del sessions[session_id]


def item_views(gate: ItemGate) -> Callable[[Principal, str], tuple[str, ...]]:
    """What a principal sees of the resources (templates included) or prompts, for telling whether it changed."""
    def view(principal: Principal, kind: str) -> tuple[str, ...]:
        catalog = gate.catalog
        items = catalog.resources() + catalog.templates() if kind == "resources" else catalog.prompts()
        return tuple(json.dumps(i.definition, sort_keys=True, default=str) for i in gate.visible(principal, items))

    return view


async def _list_changed(session: Any) -> None:
    try:
        await session.send_resource_list_changed()
        await session.send_prompt_list_changed()
    except Exception as exc:  # the client went away (the frontend forgets it when tools change)
        log.info("list_changed not sent: %s", exc)


def _principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    if ctx.request is None:
        raise MCPError(code=types.INTERNAL_ERROR, message="the gateway serves MCP over HTTP only")
    return identity_of(ctx.request.scope).principal


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    return ctx.request.headers.get("mcp-session-id") if ctx.request is not None else None


@contextlib.contextmanager
def _as_protocol_errors() -> Iterator[None]:
    """The gateway's refusals as the JSON-RPC errors clients read; anything else says only that it failed."""
    try:
        yield
    except UnknownItemError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
    except ItemRefusedError as exc:
        raise MCPError(code=REFUSED, message=str(exc)) from None
    except MCPError:
        raise
    except Exception:
        log.exception("a resources or prompts request failed inside the gateway")
        raise MCPError(code=types.INTERNAL_ERROR, message="The gateway failed.") from None
