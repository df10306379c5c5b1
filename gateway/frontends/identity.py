"""Authentication at the HTTP edge, shared by every frontend: 401 before anything else runs."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.keys import Authenticator, Identity
from gateway.core.errors import CredentialError

__all__ = ["IDENTITY_KEY", "RequireIdentity", "identity_of", "refuse_unidentified", "session_owner",
           "unauthorized_body"]

IDENTITY_KEY = "gateway.identity"


def unauthorized_body() -> bytes:
    """The JSON body of a 401."""
    return json.dumps({"error": {"code": "unauthorized",
                                 "message": "Send an API key as 'Authorization: Bearer KEY'."}}).encode()


class RequireIdentity:
    """ASGI middleware: authenticate, put the identity in the scope, or answer 401.

    A scrape-only key (``metrics: true``) is refused with 403 unless ``scrapers`` says this app is
    the one that serves them (only ``/metrics``): every other endpoint is closed to it by default,
    including any added later.
    """

    def __init__(self, app: ASGIApp, auth: Authenticator, scrapers: bool = False) -> None:
        self.app = app
        self.auth = auth
        self.scrapers = scrapers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        identity = scope.get(IDENTITY_KEY)  # found already by the connection shares (gateway/frontends/http/shares.py)
        if identity is None:
            try:
                identity = await self.auth.identify(scope["headers"])
            except CredentialError as exc:
                await refuse_unidentified(send, exc)
                return
        if identity is None:
            await refuse_unidentified(send, None)
            return
        if identity.metrics and not self.scrapers:
            await _refuse(send, 403, _SCRAPE_ONLY, challenge=False)
            return
        scope[IDENTITY_KEY] = identity
        scope["user"] = session_owner(identity)
        await self.app(scope, receive, send)


def session_owner(identity: Identity) -> AuthenticatedUser:
    """The user the MCP SDK compares to tie each MCP session to the principal that opened it.

    The SDK answers "Session not found" to anyone else who sends that ``Mcp-Session-Id``, DELETE
    included. The API key itself is never put here: the principal id is the identity.
    """
    principal = identity.principal
    return AuthenticatedUser(AccessToken(token="", client_id=principal.id, subject=principal.id,
                                         scopes=list(principal.groups)))


_SCRAPE_ONLY = json.dumps({"error": {"code": "metrics-key-scrape-only", "message": (
    "This API key has metrics: true: it may only scrape GET /metrics. Call tools, the model proxy,"
    " approvals and the admin API with another key.")}}).encode()


async def refuse_unidentified(send: Send, exc: CredentialError | None, close: bool = False) -> None:
    """Answer a request whose credential cannot be used (``exc``) or that sent none: 401 or the error's status.
    ``close``: the request body was not read, so the connection closes after the answer."""
    if exc is None:
        status, body = 401, unauthorized_body()
    else:
        status, body = exc.status, json.dumps({"error": {"code": exc.code, "message": str(exc)}}).encode()
    await _refuse(send, status, body, close=close)


async def _refuse(send: Send, status: int, body: bytes, challenge: bool = True, close: bool = False) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if challenge:  # the credential is missing or unusable: say which scheme to send
        headers.append((b"www-authenticate", b'Bearer realm="gateway"'))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def identity_of(scope: Any) -> Identity:
    """The identity ``RequireIdentity`` stored (it always runs first)."""
    identity: Identity = scope[IDENTITY_KEY]
    return identity
