"""Credentials the gateway gets for an upstream: its own token (client credentials) or one on behalf of the
caller (RFC 8693 token exchange), each cached until shortly before it expires.

    UpstreamCredentials        what an upstream asks: the ``Authorization`` value for the request it sends now
    ├── ClientCredentials      the gateway's own token for the upstream's audience: one per upstream
    └── TokenExchange          the caller's token exchanged for one whose audience is the upstream: one per caller
    TokenCache                 tokens by key until they expire (minus a margin); one fetch per key at a time
    BearerAuth                 the same credential on every request of an httpx2 client (MCP's shared connection)

The caller's token never travels as an argument: the pipeline runs the upstream call inside
``acting_for(token)`` (as ``client_requests.calling_client`` names the caller's client), and only a
``TokenExchange`` reads it, to send it to the identity provider as the subject token. It is never sent to
an upstream, and the cache keys exchanged tokens by its SHA-256, not by the token. Concurrent calls that
need the same token share one request to the IdP; a failed request is not cached (the next call asks
again) and fails the call closed with an ``UpstreamCredentialsError`` that names no secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2

from gateway.core.errors import UpstreamCredentialsError
from gateway.core.limits import MAX_EXCHANGED_TOKENS, TOKEN_EXPIRY_MARGIN_SECONDS
from gateway.core.scrub import REDACTED
from gateway.upstreams.token_client import IssuedToken, TokenClient

__all__ = ["ACCESS_TOKEN_TYPE", "TOKEN_EXCHANGE_GRANT", "BearerAuth", "ClientCredentials", "TokenCache",
           "TokenExchange", "UpstreamCredentials", "acting_for", "no_caller_token", "scrubbed"]

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class _CallerToken:
    token: str = field(repr=False)


# The verified bearer token of the caller whose call the current task runs (None: an API key, anonymous).
_caller: contextvars.ContextVar[_CallerToken | None] = contextvars.ContextVar("gateway_caller_token", default=None)


@contextlib.contextmanager
def acting_for(token: str | None) -> Iterator[None]:
    """Run an upstream call on behalf of the caller who presented ``token`` (None: a caller without one)."""
    reset = _caller.set(None if token is None else _CallerToken(token))
    try:
        yield
    finally:
        _caller.reset(reset)


def no_caller_token(upstream: str) -> str:
    """Why a caller without a verified token (an API key, or none) cannot use an upstream that acts for its caller."""
    return (f"Upstream {upstream!r} acts on behalf of the caller, so it needs a caller signed in with the identity"
            " provider (a token); a caller with an API key, or none, cannot use it.")


class UpstreamCredentials(Protocol):
    """The credential an upstream's request carries; raises ``UpstreamCredentialsError`` when there is none."""

    # Whether the credential is made from the caller's own token (token exchange): a caller without one
    # cannot use the upstream, and the pipeline refuses its calls before the policies (and any approver) see them.
    needs_caller_token: bool

    async def authorization(self) -> str:
        """The ``Authorization`` header value for a request sent now (``Bearer …``)."""
        ...

    def rejected(self, authorization: str) -> None:
        """The upstream refused this value (401): forget it, so the next request gets a fresh token."""
        ...

    async def aclose(self) -> None:
        """Close the connections to the identity provider."""
        ...


@dataclass(slots=True)
class _Entry:
    token: str = field(repr=False)
    fresh_until: float


class TokenCache:
    """Tokens by key, each until ``TOKEN_EXPIRY_MARGIN_SECONDS`` (at most a quarter of its life) before it
    expires; at most ``max_entries``, the least recently used dropped first. ``clock`` is monotonic seconds."""

    def __init__(self, max_entries: int = MAX_EXCHANGED_TOKENS, clock: Clock = time.monotonic) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._fetching: dict[str, asyncio.Task[str]] = {}
        self._max = max_entries
        self._clock = clock

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str, fetch: Callable[[], Awaitable[IssuedToken]]) -> str:
        """The fresh token under ``key``, else the one ``fetch`` gets (concurrent callers share one fetch)."""
        entry = self._entries.get(key)
        if entry is not None and self._clock() < entry.fresh_until:
            self._entries.move_to_end(key)
            return entry.token
        task = self._fetching.get(key)
        if task is None:
            task = self._fetching[key] = asyncio.create_task(self._fetch(key, fetch), name="gateway-token-fetch")
            task.add_done_callback(lambda done: done.cancelled() or done.exception())  # read, even with no waiter
        # Shielded: a caller that gives up does not cancel the fetch the others wait for.
        return await asyncio.shield(task)

    async def _fetch(self, key: str, fetch: Callable[[], Awaitable[IssuedToken]]) -> str:
        try:
            issued = await fetch()
        finally:
            del self._fetching[key]  # a failure is not kept: the next call asks the IdP again
        if issued.expires_in is not None:  # a token of unknown lifetime is used once, never kept
            margin = min(TOKEN_EXPIRY_MARGIN_SECONDS, issued.expires_in / 4)
            self._entries[key] = _Entry(issued.access_token, self._clock() + issued.expires_in - margin)
            self._entries.move_to_end(key)
            self._evict()
        return issued.access_token

    def _evict(self) -> None:
        if len(self._entries) <= self._max:
            return
        now = self._clock()
        for stale in [k for k, e in self._entries.items() if e.fresh_until <= now]:
            del self._entries[stale]
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def drop(self, token: str) -> None:
        """Forget ``token`` wherever it is kept (an upstream refused it)."""
        for key in [k for k, e in self._entries.items() if e.token == token]:
            del self._entries[key]


def _scope_fields(audience: str | None, resource: str | None, scopes: Sequence[str]) -> dict[str, str]:
    fields = {"audience": audience, "resource": resource, "scope": " ".join(scopes) or None}
    return {k: v for k, v in fields.items() if v}


class _Bearer:
    """What both grants share: the token client, the cache, the header value and forgetting a refused one."""

    def __init__(self, client: TokenClient, cache: TokenCache) -> None:
        self.client = client
        self.cache = cache

    def rejected(self, authorization: str) -> None:
        """The upstream refused this value (401): forget it, so the next request gets a fresh token."""
        scheme, _, token = authorization.partition(" ")
        if scheme == "Bearer" and token:
            self.cache.drop(token)

    async def aclose(self) -> None:
        """Close the connections to the identity provider."""
        await self.client.aclose()


class ClientCredentials(_Bearer):
    """The gateway's own token for the upstream (RFC 6749 section 4.4), one for every caller."""

    needs_caller_token = False

    def __init__(self, client: TokenClient, *, audience: str | None = None, resource: str | None = None,
                 scopes: Sequence[str] = (), cache: TokenCache | None = None) -> None:
        super().__init__(client, TokenCache(max_entries=1) if cache is None else cache)
        self._grant = {"grant_type": "client_credentials", **_scope_fields(audience, resource, scopes)}

    async def authorization(self) -> str:
        """``Bearer`` and the gateway's token for this upstream."""
        return "Bearer " + await self.cache.get("", lambda: self.client.request(self._grant))


class TokenExchange(_Bearer):
    """The caller's token exchanged at the IdP for one whose audience is the upstream (RFC 8693)."""

    needs_caller_token = True

    def __init__(self, client: TokenClient, upstream: str, *, audience: str | None = None,
                 resource: str | None = None, scopes: Sequence[str] = (),
                 requested_token_type: str = ACCESS_TOKEN_TYPE, cache: TokenCache | None = None) -> None:
        super().__init__(client, TokenCache() if cache is None else cache)
        self._upstream = upstream
        self._grant = {"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token_type": ACCESS_TOKEN_TYPE,
                       "requested_token_type": requested_token_type, **_scope_fields(audience, resource, scopes)}

    async def authorization(self) -> str:
        """``Bearer`` and a token for this upstream on behalf of the current caller."""
        caller = _caller.get()
        if caller is None:
            raise UpstreamCredentialsError(no_caller_token(self._upstream))
        key = hashlib.sha256(caller.token.encode()).hexdigest()
        grant = {**self._grant, "subject_token": caller.token}
        return "Bearer " + await self.cache.get(key, lambda: self.client.request(grant))


def scrubbed(value: Any, token: str) -> Any:
    """``value`` (JSON: strings, lists, objects) with every occurrence of ``token`` in its strings redacted."""
    if isinstance(value, str):
        return value.replace(token, REDACTED)
    if isinstance(value, list):
        return [scrubbed(v, token) for v in value]
    if isinstance(value, dict):
        return {scrubbed(k, token): scrubbed(v, token) for k, v in value.items()}
    return value


class BearerAuth(httpx2.Auth):
    """Every request of an httpx2 client carries ``credentials``; a 401 answer makes the next one fetch anew."""

    def __init__(self, credentials: UpstreamCredentials) -> None:
        self._credentials = credentials

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        value = await self._credentials.authorization()
        request.headers["authorization"] = value
        response = yield request
        if response.status_code == 401:
            self._credentials.rejected(value)
