"""Shares of the gateway's connections: no key, and no mix of keys, can take every one (issue 18).

Every request that presents a usable key holds one slot from the moment its headers are read until
its answer ends: a held call, a ``GET /mcp`` stream and a slow body all count. The slots are

    pool       ``max_connections - reserved``, shared by every key. A key may hold at most
               ``per_principal`` of them, and takes another only while more than twice as many as
               it holds are free: a key at full tilt takes at most a third of what it found free,
               so keys that use few find room whatever the heavy ones hold (k heavy keys leave
               about (2/3)^k of the pool free; the last slots go to keys that hold none).
    reserved   for approvers, admins and metrics keys on the approvals API, the admin API and
               ``/metrics``, so that a decision can be made when agents have filled the pool.

A request without a usable key holds no slot: it is answered at once (401, or an open page), and one
that carries a body is refused before its body is read, so an unauthenticated flood cannot hold
connections. Nor does a request without a body to an open route (/healthz, /readyz, the approvals
page), whoever sends it: it too is answered at once, so probes and the page are never refused here.

Past a share the answer is 429 (the key's own share) or 503 (the pool), with Retry-After.
The TCP cap in gateway/frontends/http/protocol.py stays as the backstop: the slots here add up to it,
so a connection past it finds an idle one to replace, as long as requests are answered when refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.keys import Authenticator, Identity
from gateway.core.errors import CredentialError
from gateway.core.limits import SHARE_RETRY_AFTER_SECONDS
from gateway.frontends.challenge import PLAIN, Challenge, presents_credential
from gateway.frontends.identity import IDENTITY_KEY, RefusalBodies, gateway_body, refuse_unidentified

__all__ = ["OPERATOR_PATHS", "ConnectionShares", "OverShare", "Shares"]

# Where the reserved slots serve: deciding approvals, the admin API, scrapes.
OPERATOR_PATHS = ("/v1/approvals", "/v1/admin/", "/metrics")


@dataclass(frozen=True, slots=True)
class OverShare:
    """Why a request gets no slot: the HTTP answer, and which share was full (a metrics label)."""

    status: int
    code: str
    message: str
    share: str  # "principal", "pool" or "reserved"


@dataclass(slots=True)
class _Held:
    pool: int = 0
    reserved: int = 0


class Shares:
    """The slots each key holds, and whether it may take one more (plain counting, no I/O)."""

    def __init__(self, pool: int, reserved: int, per_principal: int) -> None:
        self.pool = pool
        self.reserved = reserved
        self.per_principal = per_principal
        self._held: dict[str, _Held] = {}  # keys with a slot: bounded by the configured keys
        self._pool_busy = 0
        self._reserved_busy = 0  # operator requests beyond the pool

    def take(self, key: str, operator: bool) -> OverShare | None:
        """Take a slot for one request of this key, or say why not; give it back with ``give``."""
        held = self._held.get(key) or _Held()
        if held.pool + held.reserved >= self.per_principal:
            return OverShare(429, "connection-share", (
                f"This key already has {self.per_principal} requests open at once, its share of the gateway's"
                " connections (http.max_connections_per_principal). Wait for one to end, then try again."),
                "principal")
        free = self.pool - self._pool_busy
        if free > 2 * held.pool:  # it holds fewer than half of the free slots: the others keep room
            held.pool += 1
            self._pool_busy += 1
        elif operator and self._reserved_busy < self.reserved:
            held.reserved += 1
            self._reserved_busy += 1
        elif operator:
            return OverShare(503, "connections-reserved-full", (
                "Every connection reserved for approvers and admins is in use (http.reserved_connections)."
                " Try again shortly."), "reserved")
        else:
            return OverShare(503 if held.pool == 0 else 429, "connection-pool-busy", (
                f"The gateway's connections are busy and this key holds {held.pool} of them, as many as it may"
                " while others wait. Wait for one of its requests to end, then try again."),
                "pool" if held.pool == 0 else "principal")
        self._held[key] = held
        return None

    def give(self, key: str) -> None:
        """Give back a slot ``take`` gave this key (a reserved one first: the pool is what others wait on)."""
        held = self._held.get(key)
        if held is None:
            return
        if held.reserved:
            held.reserved -= 1
            self._reserved_busy -= 1
        elif held.pool:
            held.pool -= 1
            self._pool_busy -= 1
        if not held.pool and not held.reserved:
            del self._held[key]

    def holding(self, key: str) -> int:
        """Slots this key holds now."""
        held = self._held.get(key)
        return 0 if held is None else held.pool + held.reserved


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def _operator(identity: Identity, path: str) -> bool:
    return (identity.approver or identity.admin or identity.metrics) and path.startswith(OPERATOR_PATHS)


class ConnectionShares:
    """ASGI middleware: each identified request holds a slot of its key's share while it lasts (module docstring).

    It runs before the body is read (``BodyLimit``), so a slow body counts against its key; the identity
    found here is left in the scope for ``RequireIdentity``.
    """

    def __init__(self, app: ASGIApp, auth: Authenticator, shares: Shares,
                 open_route: Callable[[Scope], bool] = lambda scope: False,
                 refused: Callable[[str], None] | None = None, challenge: Challenge = PLAIN,
                 bodies: RefusalBodies = gateway_body) -> None:
        self.app = app
        self.challenge = challenge  # what a refusal here says in WWW-Authenticate, as RequireIdentity's do
        self.bodies = bodies  # and in which API's error format, per path
        self.auth = auth
        self.shares = shares
        self.open_route = open_route  # whether a request is for a route served without a key
        self.refused = refused  # told the share of every refusal (metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = _has_body(scope)
        if not body and self.open_route(scope):
            await self.app(scope, receive, send)
            return
        identity = scope.get(IDENTITY_KEY)  # an approver's session cookie (gateway/frontends/sso.py), checked already
        if identity is None:
            try:
                identity = await self.auth.identify(scope["headers"])
            except CredentialError as exc:  # answered here, so the credential is checked (and counted) once
                await refuse_unidentified(send, exc, close=body, challenge=self.challenge, body=self.bodies,
                                          path=scope["path"])
                return
        if identity is None:
            if body:  # refused before its body is read: no one without a key waits on anything
                await refuse_unidentified(send, None, close=True, challenge=self.challenge,
                                          presented=presents_credential(scope["headers"]), body=self.bodies,
                                          path=scope["path"])
                return
            await self.app(scope, receive, send)  # answered at once: 401, or an open page
            return
        scope[IDENTITY_KEY] = identity
        key = identity.principal.key
        over = self.shares.take(key, _operator(identity, scope["path"]))
        if over is not None:
            if self.refused is not None:
                self.refused(over.share)
            response = Response(self.bodies(scope["path"], over.status, over.code, over.message), over.status,
                                media_type="application/json")
            response.headers["retry-after"] = str(SHARE_RETRY_AFTER_SECONDS)
            if body:  # the body is not read: let the connection close after the answer
                response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.shares.give(key)
