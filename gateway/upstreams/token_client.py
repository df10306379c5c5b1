"""The gateway as an OAuth client of an identity provider: one token request, read within bounds.

A request is a form POST to the token endpoint (RFC 6749 section 3.2), the client authenticated with
its secret (HTTP Basic by default, or in the form). The endpoint is configured, or read once from the
issuer's OpenID discovery document. Every exchange with the IdP is bounded the same way: https only
(plain http only to a loopback host), no redirects followed, an answer within
``TOKEN_FETCH_TIMEOUT_SECONDS`` and ``TOKEN_RESPONSE_MAX_BYTES``.

What goes wrong becomes an ``UpstreamCredentialsError`` whose message names the upstream and the IdP's
error code (RFC 6749 section 5.2), never the client secret, the token sent or the token received: the
message reaches the audit log and, for the agent, the call's refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2

from gateway.core.capped import TooLarge, read_capped
from gateway.core.errors import UpstreamCredentialsError
from gateway.core.limits import TOKEN_FETCH_TIMEOUT_SECONDS, TOKEN_RESPONSE_MAX_BYTES
from gateway.core.loopback import secure_url_problem

__all__ = ["AuthMethod", "IssuedToken", "TokenClient", "TokenEndpoint"]

log = logging.getLogger("gateway.upstreams.credentials")

AuthMethod = Literal["client_secret_basic", "client_secret_post"]

# An IdP's error code is shown only when it has the shape RFC 6749 gives them (a few lower-case words).
_ERROR_CODE = re.compile(r"^[a-z_]{1,64}$")
_DISCOVERY = "/.well-known/openid-configuration"


def _unsafe(url: str) -> bool:
    """Whether a credential must not go to ``url`` (one an IdP named may not even parse)."""
    try:
        return secure_url_problem(url) is not None
    except ValueError:
        return True


@dataclass(frozen=True, slots=True)
class TokenEndpoint:
    """Where the gateway asks for tokens, and as which client (``token_url``, else the issuer's discovery)."""

    client_id: str
    client_secret: str = field(repr=False)
    token_url: str | None = None
    issuer: str | None = None
    auth_method: AuthMethod = "client_secret_basic"


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """An access token from the IdP and how many seconds it lives (None: the IdP did not say)."""

    access_token: str = field(repr=False)
    expires_in: float | None


class TokenClient:
    """Token requests to one IdP for one upstream (``upstream`` names it in errors)."""

    def __init__(self, endpoint: TokenEndpoint, upstream: str, *, timeout: float = TOKEN_FETCH_TIMEOUT_SECONDS,
                 max_bytes: int = TOKEN_RESPONSE_MAX_BYTES) -> None:
        self._endpoint = endpoint
        self._upstream = upstream
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._token_url = endpoint.token_url  # found by discovery on first use when only the issuer is given
        self._client: httpx2.AsyncClient | None = None
        self.requests = 0  # token requests sent (tests and diagnostics read it)

    async def aclose(self) -> None:
        """Close the connections to the IdP."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def request(self, grant: Mapping[str, str]) -> IssuedToken:
        """The token the IdP issues for ``grant`` (form fields: ``grant_type`` and the grant's own)."""
        try:
            async with asyncio.timeout(self._timeout):
                return await self._request(grant)
        except TimeoutError:
            raise self._failed(f"the identity provider did not answer within {self._timeout:g}s") from None
        except (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError) as exc:  # the type only: no URL, no form
            raise self._failed(f"the identity provider could not be reached ({type(exc).__name__})") from None

    async def _request(self, grant: Mapping[str, str]) -> IssuedToken:
        url = self._token_url or await self._discover()
        form = dict(grant)
        auth: tuple[str, str] | None = None
        if self._endpoint.auth_method == "client_secret_post":
            form.update(client_id=self._endpoint.client_id, client_secret=self._endpoint.client_secret)
        else:
            auth = (self._endpoint.client_id, self._endpoint.client_secret)
        self.requests += 1
        status, body = await self._exchange("POST", url, data=form, auth=auth)
        if status != 200:
            error = body.get("error") if isinstance(body, dict) else None
            code = error if isinstance(error, str) and _ERROR_CODE.match(error) else None
            log.warning("upstream %s: the token endpoint answered %d%s", self._upstream, status,
                        f" ({code})" if code else "")
            raise self._failed(f"the identity provider refused the token request ({code or f'HTTP {status}'})")
        return self._issued(body)

    def _issued(self, body: Any) -> IssuedToken:
        """The token of a successful answer; anything else is the IdP's fault, said without the answer's text."""
        token = body.get("access_token") if isinstance(body, dict) else None
        kind = body.get("token_type") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token or not token.isascii() or not token.isprintable():
            raise self._failed("the identity provider's answer holds no usable access token")
        if not isinstance(kind, str) or kind.lower() != "bearer":
            raise self._failed("the identity provider issued a token that is not a bearer token")
        lifetime = body.get("expires_in")
        if isinstance(lifetime, str) and lifetime.isdigit():  # some IdPs send it as text
            lifetime = int(lifetime)
        ok = isinstance(lifetime, (int, float)) and not isinstance(lifetime, bool) and lifetime > 0
        return IssuedToken(token, float(lifetime) if ok else None)

    async def _discover(self) -> str:
        """The issuer's token endpoint from its discovery document (read once, then kept)."""
        issuer = self._endpoint.issuer
        assert issuer is not None  # the config gives token_url or issuer
        status, body = await self._exchange("GET", issuer.rstrip("/") + _DISCOVERY)
        document = body if isinstance(body, dict) else {}
        if status != 200 or document.get("issuer") != issuer:
            raise self._failed(f"the identity provider's discovery document could not be used (HTTP {status})")
        url = document.get("token_endpoint")
        if not isinstance(url, str) or _unsafe(url):
            raise self._failed("the identity provider's discovery document names no usable https token endpoint")
        self._token_url = url
        return url

    async def _exchange(self, method: str, url: str, **send: Any) -> tuple[int, Any]:
        """(status, JSON body or None) of one request, read up to the size cap; redirects are not followed."""
        if _unsafe(url):  # checked at load too; a discovered endpoint is checked here
            raise self._failed("the identity provider's endpoint is not an https URL")
        if self._client is None:
            self._client = httpx2.AsyncClient(follow_redirects=False, timeout=self._timeout)
        async with self._client.stream(method, url, headers={"accept": "application/json"}, **send) as response:
            try:
                content = await read_capped(response, self._max_bytes)
            except TooLarge:
                raise self._failed("the identity provider's answer is too large") from None
        if 300 <= response.status_code < 400:
            raise self._failed("the identity provider answered with a redirect, which is not followed")
        try:
            return response.status_code, json.loads(content)
        except ValueError:
            return response.status_code, None

    def _failed(self, why: str) -> UpstreamCredentialsError:
        return UpstreamCredentialsError(f"No credential for upstream {self._upstream!r}: {why}.")
