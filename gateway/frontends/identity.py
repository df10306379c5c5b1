"""Authentication at the HTTP edge, shared by every frontend: 401 before anything else runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.keys import Authenticator, Identity
from gateway.core.errors import CredentialError
from gateway.frontends.challenge import PLAIN, Challenge, presents_credential

__all__ = ["IDENTITY_KEY", "RefusalBodies", "RequireIdentity", "gateway_body", "identity_of", "refuse_unidentified",
           "session_owner", "unauthorized_body"]

IDENTITY_KEY = "gateway.identity"
UNAUTHORIZED = "Send an API key as 'Authorization: Bearer KEY'."

# A refusal's JSON body for a path: (path, status, code, message) -> bytes. The model proxy's endpoints answer in
# their API's own error format (gateway/frontends/model_endpoints.py), so an SDK shows the message; the rest in ours.
RefusalBodies = Callable[[str, int, str, str], bytes]


def gateway_body(path: str, status: int, code: str, message: str) -> bytes:
    """The gateway's own error body: ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def unauthorized_body() -> bytes:
    """The JSON body of a 401."""
    return gateway_body("", 401, "unauthorized", UNAUTHORIZED)


class RequireIdentity:
    """ASGI middleware: authenticate, put the identity in the scope, or answer 401.

    A scrape-only key (``metrics: true``) is refused with 403 unless ``scrapers`` says this app is
    the one that serves them (only ``/metrics``): every other endpoint is closed to it by default,
    including any added later. ``challenge``: what every refusal's ``WWW-Authenticate`` adds
    (gateway/frontends/challenge.py).
    """

    def __init__(self, app: ASGIApp, auth: Authenticator, scrapers: bool = False,
                 challenge: Challenge = PLAIN, bodies: RefusalBodies = gateway_body) -> None:
        self.app = app
        self.auth = auth
        self.scrapers = scrapers
        self.challenge = challenge
        self.bodies = bodies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        identity = scope.get(IDENTITY_KEY)  # found already by the connection shares (gateway/frontends/http/shares.py)
        if identity is None:
            try:
                identity = await self.auth.identify(scope["headers"])
            except CredentialError as exc:
                await refuse_unidentified(send, exc, challenge=self.challenge, body=self.bodies, path=scope["path"])
                return
        if identity is None:
            await refuse_unidentified(send, None, challenge=self.challenge,
                                      presented=presents_credential(scope["headers"]), body=self.bodies,
                                      path=scope["path"])
            return
        if identity.metrics and not self.scrapers:
            await _refuse(send, 403, self.bodies(scope["path"], 403, "metrics-key-scrape-only", _SCRAPE_ONLY),
                          challenge=None)
            return
        scope[IDENTITY_KEY] = identity
        scope["user"] = session_owner(identity)
        await self.app(scope, receive, send)


def session_owner(identity: Identity) -> AuthenticatedUser:
    """The user the MCP SDK compares to tie each MCP session to the principal that opened it.

    The SDK answers "Session not found" to anyone else who sends that ``Mcp-Session-Id``, DELETE
    included. No credential is put here: the principal's binding key (``Principal.key``: an API key's principal
    id, a token's issuer and subject) is the identity, so a later token of the same caller owns the session too.
    """
    principal = identity.principal
    return AuthenticatedUser(AccessToken(token="", client_id=principal.key, subject=principal.key,
                                         scopes=list(principal.groups)))


_SCRAPE_ONLY = ("This API key has metrics: true: it may only scrape GET /metrics. Call tools, the model proxy,"
                " approvals and the admin API with another key.")


async def refuse_unidentified(send: Send, exc: CredentialError | None, close: bool = False,
                              challenge: Challenge = PLAIN, presented: bool = False,
                              body: RefusalBodies = gateway_body, path: str = "") -> None:
    """Answer a request whose credential cannot be used (``exc``) or that sent none: 401 or the error's status.
    ``close``: the request body was not read, so the connection closes after the answer. ``presented``: a
    credential was sent but recognised by no one (an unknown key). ``body`` writes the answer for ``path``."""
    if exc is None:
        status, content = 401, body(path, 401, "unauthorized", UNAUTHORIZED)
    else:
        status, content = exc.status, body(path, exc.status, exc.code, str(exc))
    await _refuse(send, status, content, challenge=challenge.header(exc, presented), close=close)


async def _refuse(send: Send, status: int, body: bytes, challenge: bytes | None, close: bool = False) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if challenge is not None:  # the credential is missing or unusable: say which scheme to send, and how to get one
        headers.append((b"www-authenticate", challenge))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def identity_of(scope: Any) -> Identity:
    """The identity ``RequireIdentity`` stored (it always runs first)."""
    identity: Identity = scope[IDENTITY_KEY]
    return identity
