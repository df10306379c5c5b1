"""The MCP era an upstream speaks, and how its tool-list changes reach the gateway in each.

``mcp.protocol`` in the config chooses (``PROTOCOLS``):

- ``auto`` (the default): the ``initialize`` handshake when the server offers it, else 2026-07-28
  (a server that refuses the handshake is connected again with the SDK's ``server/discover``
  probe). The handshake era comes first because a server that speaks both eras can give more through
  it, and the gateway cannot tell in advance: a tool's ``execution`` (task support; at 2026-07-28
  only a server-wide tasks extension), and questions a tool asks its client with the SDK's usual
  ``ctx.elicit`` / ``session.create_message`` (a standalone request, which the 2026-07-28 era forbids:
  only tools that return ``InputRequiredResult`` can ask there).
- ``newest``: 2026-07-28 when the server answers ``server/discover``, else the handshake (the SDK's
  ``mode="auto"``). What 2026-07-28 carries is relayed: task support from the server's tasks extension
  (``tasks.py``), the server's ``InputRequiredResult`` questions (the SDK's client answers them
  through the gateway's callbacks inside the call, so they reach exactly that call's client), and the
  caller's log level sent with each call.
- ``legacy`` or ``2026-07-28``: that era only.

A handshake-era server sends ``notifications/*/list_changed`` on its session; a 2026-07-28 server sends change
notifications only on ``subscriptions/listen`` streams, so on such a connection the gateway keeps
one open (``follow_tool_changes``: tools, resources and prompts, as the server announces them), re-opening
it if it drops (there is no replay: a re-opened stream is followed by fresh lists).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.session import MessageHandlerFnT
from mcp.client.subscriptions import SubscriptionLost, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.core.limits import UPSTREAM_LISTEN_RETRY_SECONDS

__all__ = ["PROTOCOLS", "connect", "follow_tool_changes", "is_modern"]

log = logging.getLogger("gateway.upstreams.mcp")


# config value → the SDK client modes tried in turn (the next only when the server refused the previous).
PROTOCOLS: dict[str, tuple[str, ...]] = {
    "auto": ("legacy", "auto"),
    "newest": ("auto",),
    "legacy": ("legacy",),
    "2026-07-28": ("2026-07-28",),
}


async def connect(stack: contextlib.AsyncExitStack, transport: Callable[[], Any], protocol: str, name: str,
                  message_handler: MessageHandlerFnT, **options: Any) -> Client:
    """An SDK client entered on ``stack``, in the first era of ``protocol`` the server accepts.

    ``options`` go to ``mcp.Client`` as they are (the callbacks for the upstream's requests to the client).
    """
    modes = PROTOCOLS[protocol]
    for mode in modes[:-1]:
        try:
            # No response cache: the gateway lists tools when it means to (start, changes, health checks).
            return await stack.enter_async_context(
                Client(transport(), mode=mode, message_handler=message_handler, cache=None, **options))
        except Exception as exc:
            refusal = _refusal(exc)
            if refusal is None:  # not an answer (no process, no connection): no other era will do better
                raise
            log.info("upstream %s refused the %s era (%s); trying the next", name, mode, refusal)
    return await stack.enter_async_context(
        Client(transport(), mode=modes[-1], message_handler=message_handler, cache=None, **options))


def _refusal(exc: BaseException) -> MCPError | None:
    """The server's JSON-RPC error in ``exc`` (the SDK may wrap it in exception groups), if it is one."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED else None


def is_modern(client: Client) -> bool:
    """Whether this connection speaks the stateless 2026-07-28 era (or later)."""
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


async def follow_tool_changes(stack: contextlib.AsyncExitStack, client: Client, name: str,
                              on_change: Callable[[], Awaitable[None]],
                              on_items: Callable[[], Awaitable[None]] | None = None) -> None:
    """On a 2026-07-28 connection whose server announces list changes, listen for them until ``stack`` closes.

    Tool-list changes call ``on_change``; resource and prompt list changes reach the client's message handler
    as the SDK tees every listen event to it. After a stream is re-opened both lists are read again
    (``on_items`` for resources and prompts).
    """
    caps = client.server_capabilities
    kinds = {"tools_list_changed": bool(caps.tools and caps.tools.list_changed),
             "resources_list_changed": bool(caps.resources and caps.resources.list_changed),
             "prompts_list_changed": bool(caps.prompts and caps.prompts.list_changed)}
    if not is_modern(client) or not any(kinds.values()):
        return  # handshake era: list_changed arrives on the session itself
    group = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(group.cancel_scope.cancel)  # runs before the group is left: the listen loop never ends alone
    group.start_soon(_listen, client, name, kinds, on_change, on_items)


async def _listen(client: Client, name: str, kinds: dict[str, bool], on_change: Callable[[], Awaitable[None]],
                  on_items: Callable[[], Awaitable[None]] | None) -> None:
    while True:
        try:
            async with client.listen(tools_list_changed=kinds["tools_list_changed"],
                                     resources_list_changed=kinds["resources_list_changed"],
                                     prompts_list_changed=kinds["prompts_list_changed"]) as subscription:
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        await on_change()
            log.info("upstream %s closed its listen stream; listening again", name)
        except SubscriptionLost as exc:
            log.info("upstream %s: listen stream lost (%s); listening again", name, exc)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                return  # the connection is gone; the supervisor reconnects, and this starts again
            log.warning("upstream %s refused subscriptions/listen (%s); its tool list is re-read by health checks",
                        name, exc)
            return
        await anyio.sleep(UPSTREAM_LISTEN_RETRY_SECONDS)
        await on_change()  # changes while not listening were not sent: read the lists again
        if on_items is not None:
            await on_items()
