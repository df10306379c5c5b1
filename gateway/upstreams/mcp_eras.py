"""The MCP era an upstream speaks, and how its tool-list changes reach the gateway in each.

The gateway connects with the SDK's ``mode="auto"`` by default: a ``server/discover`` probe, and the
2026-07-28 protocol if the server answers it, else the ``initialize`` handshake. A handshake-era
server sends ``notifications/tools/list_changed`` on its session; a 2026-07-28 server sends change
notifications only on ``subscriptions/listen`` streams, so on such a connection the gateway keeps
one open (``follow_tool_changes``), re-opening it if it drops (there is no replay: a re-opened
stream is followed by a fresh tools/list).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import anyio
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.subscriptions import SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.limits import UPSTREAM_LISTEN_RETRY_SECONDS

__all__ = ["follow_tool_changes", "is_modern"]

log = logging.getLogger("gateway.upstreams.mcp")


def is_modern(client: Client) -> bool:
    """Whether this connection speaks the stateless 2026-07-28 era (or later)."""
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


async def follow_tool_changes(stack: contextlib.AsyncExitStack, client: Client, name: str,
                              on_change: Callable[[], Awaitable[None]]) -> None:
    """On a 2026-07-28 connection whose server announces tool-list changes, listen for them until ``stack`` closes."""
    tools = client.server_capabilities.tools
    if not is_modern(client) or tools is None or not tools.list_changed:
        return  # handshake era: list_changed arrives on the session itself
    group = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(group.cancel_scope.cancel)  # runs before the group is left: the listen loop never ends alone
    group.start_soon(_listen, client, name, on_change)


async def _listen(client: Client, name: str, on_change: Callable[[], Awaitable[None]]) -> None:
    while True:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
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
        await on_change()  # changes while not listening were not sent: read the list again
