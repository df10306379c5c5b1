"""``subscriptions/listen`` (MCP 2026-07-28): tool-list change notifications for stateless-era clients.

A 2026-07-28 client has no session for the gateway to remember; it opts in to change events by
sending ``subscriptions/listen``, whose response is the event stream. Each stream here belongs to
the principal that opened it and hears ``notifications/tools/list_changed`` only when the list
*that principal* sees has changed: an upstream's list changing, or a policy reload showing or
hiding a tool. So a listener learns nothing about tools it cannot see (bob is not told that a
tool only alice may use appeared), and a change that does not touch its list sends nothing.

Streams are capped per principal and in all (``limits.py``); one more gets a JSON-RPC error before
the acknowledgment. Events are level triggers ("refetch"), so each stream holds at most one
pending event of each kind: a stream whose client reads slowly gets one notification, not a backlog.

Resource and prompt list changes (``resourcesListChanged``, ``promptsListChanged``) follow the same rule, when
the frontend gives the items a principal sees (``visible_items``): a stream asking for them hears
``notifications/resources/list_changed`` or ``notifications/prompts/list_changed`` only when the resources
(templates included) or prompts *its principal* sees changed.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
    event_to_notification,
)

from gateway.core.limits import MAX_CACHED_SESSIONS, MAX_LISTEN_STREAMS, MAX_LISTEN_STREAMS_PER_PRINCIPAL
from gateway.frontends.identity import identity_of
from gateway.policy.call import Principal

__all__ = ["SessionViews", "ToolListeners"]

log = logging.getLogger("gateway.frontends.mcp.listen")

# What a principal's tool list is, for telling whether it changed: the exposed tools it sees, by
# identity (the registry keeps a tool's object while its definition is unchanged).
View = tuple[Any, ...]
# The resources or prompts a principal sees ("resources" | "prompts" → their definitions, as JSON text).
ItemViews = Callable[[Principal, str], tuple[str, ...]]
_EVENTS: dict[str, ServerEvent] = {"tools": ToolsListChanged(), "resources": ResourcesListChanged(),
                                   "prompts": PromptsListChanged()}


@dataclass(eq=False)
class _Stream:
    principal: Principal
    view: View
    tools: bool  # the client asked for tool-list changes
    wake: anyio.Event = field(default_factory=anyio.Event)
    items: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "resources" / "prompts" asked for: last seen
    pending: set[str] = field(default_factory=set)  # the kinds of change to tell of at the next wake


def _principal_key(principal: Principal) -> str:
    return json.dumps([principal.key, principal.to_cel()], sort_keys=True, default=str)


def _same(a: View, b: View) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class ToolListeners:
    """The ``subscriptions/listen`` handler, and the fan-out of tool-list changes to its streams."""

    def __init__(self, visible: Callable[[Principal], Sequence[Any]], *, max_streams: int = MAX_LISTEN_STREAMS,
                 max_per_principal: int = MAX_LISTEN_STREAMS_PER_PRINCIPAL,
                 visible_items: ItemViews | None = None) -> None:
        self._visible = visible
        self._visible_items = visible_items
        self.max_streams = max_streams
        self.max_per_principal = max_per_principal
        self._streams: set[_Stream] = set()

    def count(self, principal_id: str | None = None) -> int:
        """Open streams (of one principal, when given)."""
        return sum(1 for s in self._streams if principal_id is None or s.principal.key == principal_id)

    def changed(self) -> None:
        """Something that shapes tool lists changed: wake each stream whose principal now sees a different list."""
        views: dict[str, View] = {}
        for stream in [s for s in self._streams if s.tools]:
            key = _principal_key(stream.principal)
            if key not in views:
                try:
                    views[key] = tuple(self._visible(stream.principal))
                except Exception:  # a policy that cannot be evaluated: tell the client to look again
                    log.exception("tool list for %s could not be computed", stream.principal.id)
                    views[key] = ()
            if not _same(views[key], stream.view):
                stream.view = views[key]
                stream.pending.add("tools")
                stream.wake.set()

    def items_changed(self) -> None:
        """Resources or prompts changed (at an upstream, or by a reload): wake each stream whose principal's changed."""
        views: dict[tuple[str, str], tuple[str, ...]] = {}
        for stream in [s for s in self._streams if s.items]:
            for kind, seen in stream.items.items():
                key = (_principal_key(stream.principal), kind)
                if key not in views:
                    views[key] = self._items(stream.principal, kind)
                if views[key] != seen:
                    stream.items[kind] = views[key]
                    stream.pending.add(kind)
                    stream.wake.set()

    def _items(self, principal: Principal, kind: str) -> tuple[str, ...]:
        assert self._visible_items is not None
        try:
            return self._visible_items(principal, kind)
        except Exception:  # a policy that cannot be evaluated: tell the client to look again
            log.exception("%s list for %s could not be computed", kind, principal.id)
            return ()

    async def __call__(self, ctx: ServerRequestContext[Any, Any],
                       params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        """Serve one listen stream until the client goes away (there is no graceful end: no result is sent)."""
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        if ctx.request is None:
            raise MCPError(types.INTERNAL_ERROR, "the gateway serves MCP over HTTP only")
        principal = identity_of(ctx.request.scope).principal
        if self.count(principal.key) >= self.max_per_principal:
            raise MCPError(types.INVALID_REQUEST,
                           f"This key already has {self.max_per_principal} listen streams open, the most it may have."
                           " Close one first.")
        if len(self._streams) >= self.max_streams:
            raise MCPError(types.INVALID_REQUEST, "The gateway has too many listen streams open; try again later.")
        # List changes are delivered (resources and prompts when the frontend serves them); any other kind asked
        # for (resource subscriptions) is left out of the acknowledgment.
        asked = params.notifications
        items = self._visible_items is not None
        honored = types.SubscriptionFilter(
            tools_list_changed=True if asked.tools_list_changed else None,
            resources_list_changed=True if asked.resources_list_changed and items else None,
            prompts_list_changed=True if asked.prompts_list_changed and items else None)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        stream = _Stream(principal, tuple(self._visible(principal)), bool(honored.tools_list_changed))
        for kind, wanted in (("resources", honored.resources_list_changed), ("prompts", honored.prompts_list_changed)):
            if wanted:
                stream.items[kind] = self._items(principal, kind)
        self._streams.add(stream)
        try:
            await ctx.session.send_notification(types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)),
                related_request_id=subscription_id)
            while True:
                await stream.wake.wait()
                stream.wake = anyio.Event()
                kinds, stream.pending = stream.pending, set()
                for kind in ("tools", "resources", "prompts"):
                    if kind in kinds:
                        await ctx.session.send_notification(event_to_notification(_EVENTS[kind], meta),
                                                            related_request_id=subscription_id)
        finally:  # the client went away: the SDK cancels this handler
            self._streams.discard(stream)


class SessionViews:
    """The same rule for handshake-era sessions: which of them now see a different tool list."""

    def __init__(self, visible: Callable[[Principal], Sequence[Any]], limit: int = MAX_CACHED_SESSIONS) -> None:
        self._visible = visible
        self._limit = limit
        self._views: OrderedDict[str, tuple[Principal, View]] = OrderedDict()

    def remember(self, session_id: str, principal: Principal) -> None:
        """Note the principal of a session (and the list it can see, the first time)."""
        if session_id not in self._views:
            self._views[session_id] = (principal, tuple(self._visible(principal)))
        self._views.move_to_end(session_id)
        while len(self._views) > self._limit:
            self._views.popitem(last=False)

    def changed(self, session_ids: Iterable[str]) -> list[str]:
        """The sessions whose principal now sees another list than they were last told of (unknown ones too)."""
        lists: dict[str, View] = {}
        out = []
        for session_id in session_ids:
            known = self._views.get(session_id)
            if known is None:
                out.append(session_id)
                continue
            principal, view = known
            key = _principal_key(principal)
            if key not in lists:
                lists[key] = tuple(self._visible(principal))
            if not _same(lists[key], view):
                self._views[session_id] = (principal, lists[key])
                out.append(session_id)
        return out
