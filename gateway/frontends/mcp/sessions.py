"""MCP sessions per principal: each is owned by the principal that opened it, and each has a cap.

Ownership is the SDK's: ``RequireIdentity`` puts the principal in ``scope["user"]``, and the
SDK's session manager answers 404 "Session not found" to any other principal that sends the
session's id (DELETE included). The cap is ours: a principal with ``max_per_principal`` sessions
open gets a 429 for the next one, until it closes one (HTTP DELETE) or one is closed for idling;
other principals still get sessions. Refusing is chosen over closing the principal's oldest
session, because that session may be an agent at work.

The cap reads the SDK manager's session owners and hooks its admission of a new session, both through
``_sdk.SessionManager`` (tests/frontends/mcp/test_sdk.py pins them).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext, authorization_context
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp_types import INVALID_REQUEST
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.frontends.mcp._sdk import SessionManager
from gateway.frontends.mcp.quiet import JsonTransport

__all__ = ["CappedSessions", "SessionCap"]


class CappedSessions(SessionManager):
    """The SDK's session manager, opening at most ``max_per_principal`` sessions per principal."""

    def __init__(self, app: Any, max_per_principal: int) -> None:
        super().__init__(app=app)
        self.max_per_principal = max_per_principal

    def full(self, owner: AuthorizationContext | None) -> bool:
        """Whether this principal already has its most sessions open."""
        if owner is None:
            return False
        return sum(1 for o in self.owners() if o == owner) >= self.max_per_principal

    def admits(self, requestor: AuthorizationContext | None) -> bool:
        """Not past the cap: under the SDK's session-creation lock, so concurrent opens cannot overshoot it
        (the SDK answers a refusal here with 503; ``SessionCap`` answers the usual case first, with 429)."""
        return not self.full(requestor)

    def admitted(self, transport: StreamableHTTPServerTransport) -> None:
        """Each session's transport answers in JSON or SSE, chosen per request (quiet.py)."""
        transport.__class__ = JsonTransport


class SessionCap:
    """ASGI middleware before the MCP endpoint: a request that would open one session too many gets 429."""

    def __init__(self, app: ASGIApp, sessions: CappedSessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        opening = scope["type"] == "http" and scope["method"] == "POST" and not any(
            name.lower() == MCP_SESSION_ID_HEADER.encode() for name, _ in scope["headers"])
        if opening and isinstance(user, AuthenticatedUser) and self.sessions.full(authorization_context(user)):
            cap = self.sessions.max_per_principal
            response = JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                "code": INVALID_REQUEST,
                "message": f"This key already has {cap} MCP sessions open, the most it may have. Close one"
                           " (HTTP DELETE with its Mcp-Session-Id), or wait until an idle one is closed."}},
                status_code=429)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
