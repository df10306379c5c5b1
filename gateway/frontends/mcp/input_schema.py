"""A tools/call's input schema for the SDK's ``Mcp-Param-*`` header check, by registry lookup.

In the 2026-07-28 era the SDK validates a tools/call's ``Mcp-Param-*`` headers against the called
tool's input schema before dispatch. Without ``get_tool_input_schema`` it finds that schema by
running the server's whole tools/list handler on every call (the policy visibility check over
every tool, and serialising the catalogue). This answers the same question for one tool.

The SDK calls the lookup with the tool's name only, so the caller's identity reaches it through a
context variable set by ``CallerScope`` around the MCP endpoint: the SDK awaits the check in the
request's own task. A tool this caller may not see, or a lookup without a caller, has no schema
(None), exactly as the listing would not advertise it: the SDK then skips the header check and
the call is refused as an unknown tool by dispatch, so a hidden tool stays unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.identity import Identity
from gateway.frontends.identity import IDENTITY_KEY
from gateway.pipeline import Gateway

__all__ = ["CallerScope", "input_schema_lookup"]

_caller: ContextVar[Identity | None] = ContextVar("gateway_mcp_caller", default=None)


class CallerScope:
    """ASGI middleware: the request's identity, readable by the schema lookup while the request runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _caller.set(scope.get(IDENTITY_KEY))
        try:
            await self.app(scope, receive, send)
        finally:
            _caller.reset(token)


def input_schema_lookup(gateway: Gateway) -> Callable[[str], Mapping[str, Any] | None]:
    """The SDK's ``get_tool_input_schema``: the tool's input schema when this caller may see it, else None."""

    def lookup(name: str) -> Mapping[str, Any] | None:
        identity = _caller.get()
        if identity is None or (tool := gateway.tool_visible(identity.principal, name)) is None:
            return None
        return tool.spec.input_schema

    return lookup
