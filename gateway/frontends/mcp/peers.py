"""The handshake-era sessions the gateway knows: each session id's latest ``ServerSession``, told of list changes.

The SDK builds a ServerSession per request, so a weak reference dies with the request; a kept one can still
notify over the connection's standalone stream after its request ended. A session hears
``notifications/tools/list_changed`` only when the list its principal sees changed (``listen.SessionViews``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from starlette.types import Scope

from gateway.core.limits import MAX_CACHED_SESSIONS
from gateway.frontends.identity import identity_of
from gateway.frontends.mcp.listen import SessionViews
from gateway.policy.call import Principal

__all__ = ["Peers"]


class Peers:
    """MCP session id → its latest request's ServerSession, at most ``MAX_CACHED_SESSIONS`` of them."""

    def __init__(self, visible: Callable[[Principal], Sequence[Any]]) -> None:
        self._sessions: OrderedDict[str, Any] = OrderedDict()
        self._views = SessionViews(visible)  # told only of their own list
        self._background: set[asyncio.Future[None]] = set()

    def get(self, session_id: str) -> Any:
        """The session last seen with this id (its ServerSession), or None."""
        return self._sessions.get(session_id)

    def sessions(self) -> list[Any]:
        """Every session known now."""
        return list(self._sessions.values())

    def remember(self, session_id: str, session: Any, scope: Scope) -> None:
        """Keep ``session`` as the one to tell of tool-list changes, for the caller in ``scope``."""
        self._sessions[session_id] = session
        self._sessions.move_to_end(session_id)
        self._views.remember(session_id, identity_of(scope).principal)
        while len(self._sessions) > MAX_CACHED_SESSIONS:
            self._sessions.popitem(last=False)

    def tools_changed(self) -> None:
        """Tell each session whose principal now sees another tool list."""
        peers = dict(self._sessions)
        for session_id in self._views.changed(peers):
            task = asyncio.ensure_future(self._notify(session_id, peers[session_id]))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _notify(self, session_id: str, session: Any) -> None:
        try:
            await session.send_tool_list_changed()
        except Exception:  # the client went away; forget it
            if self._sessions.get(session_id) is session:
                del self._sessions[session_id]
