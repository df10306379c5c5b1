"""Single sign-on for approvers: the OpenID Connect authorization code flow with PKCE, as a client of one issuer.

    start    a sign-in gets a fresh ``state``, ``nonce`` and PKCE verifier (S256), kept here for
             ``SSO_LOGIN_SECONDS`` and bound to the browser by a random value only that browser's
             cookie holds (``SignIns``); the browser is sent to the IdP's authorization endpoint
    finish   the IdP sends the browser back with ``code`` and ``state``: the state is taken (once:
             a replay finds nothing), its browser value must match, the code is exchanged at the
             token endpoint with the verifier (and the client secret, basic or post), and the ID
             token is verified by the issuer's JWT authenticator (signature, ``iss``, ``aud`` =
             the client id, times, algorithm) and must carry this sign-in's ``nonce``
    identity the verified claims go through the same ``principal`` mapping, ``rules`` and
             ``roles`` as the issuer's access tokens (``identity_for_claims``)

Discovery (``{issuer}/.well-known/openid-configuration``) and the token request never follow
redirects, are capped in size and time, and use https (http only on loopback). Every refusal is an
``SsoRefused`` with a bounded ``reason``; the IdP's own words are never shown as they are.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

import httpx2

from gateway.auth.identity import Identity
from gateway.core.capped import TooLarge, read_capped
from gateway.core.errors import CredentialError
from gateway.core.limits import (
    MAX_SSO_PENDING_LOGINS,
    MAX_SSO_RESPONSE_BYTES,
    SSO_DISCOVERY_MAX_AGE_SECONDS,
    SSO_HTTP_TIMEOUT_SECONDS,
    SSO_LOGIN_SECONDS,
)

__all__ = ["SSO_REFUSAL_REASONS", "Endpoints", "IdTokenChecker", "OidcClient", "OidcFlow", "PendingLogin", "SignIns",
           "SsoRefused", "error_word", "pkce_challenge"]


# Every ``SsoRefused.reason`` (and ``not-approver``: signed in, but with neither role): what /metrics counts
# sign-ins refused by, so the label stays bounded whatever is raised later (anything else counts as ``other``).
SSO_REFUSAL_REASONS = frozenset({"bad-code", "bad-id-token", "bad-nonce", "bad-state", "idp-refused",
                                 "idp-unavailable", "not-allowed", "other-browser", "token-refused", "not-approver"})


class SsoRefused(CredentialError):
    """A sign-in that cannot be completed; ``reason`` is one of a few fixed words (safe to show and count)."""

    code = "sso-refused"

    def __init__(self, reason: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class IdTokenChecker(Protocol):
    """What sign-in needs of the issuer's JWT authenticator (``gateway.auth.jwt.JwtAuthenticators``)."""

    async def verify(self, token: str, *, issuer: str, audiences: Sequence[str]) -> dict[str, Any]:
        """The token's verified claims (signature, iss, aud, times, algorithm), or raise ``CredentialError``."""
        ...

    def identity_for_claims(self, issuer: str, claims: Mapping[str, Any], token: str | None = None) -> Identity:
        """The identity the issuer's mappings, rules and roles make of these claims."""
        ...


@dataclass(frozen=True, slots=True)
class OidcClient:
    """The gateway as an OpenID Connect client of one issuer (plain values from ``approvals.sso``)."""

    issuer: str
    client_id: str
    client_secret: str | None = None  # None: a public client (PKCE only)
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    token_auth_method: str = "client_secret_basic"  # or client_secret_post


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The IdP's endpoints, from its discovery document."""

    authorization: str
    token: str
    end_session: str | None = None


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """One sign-in under way: what the callback must match and what the token request must send."""

    state: str
    nonce: str
    verifier: str
    browser: str  # SHA-256 of the value the browser's sign-in cookie holds
    redirect_uri: str
    next_path: str
    expires: float  # monotonic


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of a PKCE verifier (RFC 7636 section 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class SignIns:
    """The sign-ins under way, each taken at most once, for at most ``SSO_LOGIN_SECONDS``; bounded in number."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, limit: int = MAX_SSO_PENDING_LOGINS) -> None:
        self._clock = clock
        self._limit = limit
        self._pending: OrderedDict[str, PendingLogin] = OrderedDict()  # by state, oldest first

    def start(self, redirect_uri: str, next_path: str) -> tuple[PendingLogin, str]:
        """A new sign-in, and the value to put in the browser's sign-in cookie."""
        now = self._clock()
        while self._pending and (len(self._pending) >= self._limit
                                 or next(iter(self._pending.values())).expires <= now):
            self._pending.popitem(last=False)
        browser = secrets.token_urlsafe(32)
        pending = PendingLogin(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32),
                               verifier=secrets.token_urlsafe(48), browser=_digest(browser),
                               redirect_uri=redirect_uri, next_path=next_path, expires=now + SSO_LOGIN_SECONDS)
        self._pending[pending.state] = pending
        return pending, browser

    def finish(self, state: str | None, browser: str | None) -> PendingLogin:
        """Take the sign-in ``state`` names, if this browser started it and it is still fresh."""
        pending = self._pending.pop(state, None) if state else None
        if pending is None:
            raise SsoRefused("bad-state", "This sign-in link is unknown, was used already or has expired."
                             " Start again from the approvals page.")
        if pending.expires <= self._clock():
            raise SsoRefused("bad-state", "This sign-in took too long. Start again from the approvals page.")
        if browser is None or not hmac.compare_digest(pending.browser, _digest(browser)):
            raise SsoRefused("other-browser", "This sign-in was started in another browser (or its cookie is"
                             " gone). Start again from the approvals page in this browser.")
        return pending

    def __len__(self) -> int:
        return len(self._pending)


def error_word(error: object) -> str:
    """An OAuth ``error`` code as " (code)" when it is one (a short word of letters and _), else "": never raw text."""
    if isinstance(error, str) and 0 < len(error) <= 64 and error.replace("_", "").isalnum() and error.isascii():
        return f" ({error})"
    return ""


def _allowed_url(url: str) -> bool:
    """https, or http to this machine only."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return True
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


class OidcFlow:
    """The protocol with one IdP: discovery, the authorization request, the code exchange and the ID token."""

    def __init__(self, client: OidcClient, checker: IdTokenChecker, http: httpx2.AsyncClient | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not _allowed_url(client.issuer):
            raise ValueError(f"issuer {client.issuer!r} must be https (http only on loopback)")
        self.client = client
        self._checker = checker
        self._http = http or httpx2.AsyncClient(follow_redirects=False, timeout=SSO_HTTP_TIMEOUT_SECONDS)
        self._clock = clock
        self._endpoints: tuple[Endpoints, float] | None = None

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()

    async def endpoints(self) -> Endpoints:
        """The IdP's endpoints (discovery, cached for ``SSO_DISCOVERY_MAX_AGE_SECONDS``)."""
        if self._endpoints is not None and self._endpoints[1] > self._clock():
            return self._endpoints[0]
        issuer = self.client.issuer.rstrip("/")
        doc = await self._json("GET", f"{issuer}/.well-known/openid-configuration", "idp-unavailable")
        if str(doc.get("issuer", "")).rstrip("/") != issuer:
            raise SsoRefused("idp-unavailable", "The identity provider's discovery document names another issuer.",
                             502)
        found: dict[str, str | None] = {}
        for name in ("authorization_endpoint", "token_endpoint", "end_session_endpoint"):
            value = doc.get(name)
            if value is not None and (not isinstance(value, str) or not _allowed_url(value)):
                raise SsoRefused("idp-unavailable", f"The identity provider's {name} is not an https URL.", 502)
            found[name] = value
        if not found["authorization_endpoint"] or not found["token_endpoint"]:
            raise SsoRefused("idp-unavailable", "The identity provider's discovery document lacks its endpoints.", 502)
        methods = doc.get("code_challenge_methods_supported")
        if isinstance(methods, list) and "S256" not in methods:
            raise SsoRefused("idp-unavailable", "The identity provider does not support PKCE with S256.", 502)
        endpoints = Endpoints(str(found["authorization_endpoint"]), str(found["token_endpoint"]),
                              found["end_session_endpoint"])
        self._endpoints = (endpoints, self._clock() + SSO_DISCOVERY_MAX_AGE_SECONDS)
        return endpoints

    async def authorization_url(self, pending: PendingLogin) -> str:
        """Where to send the browser to sign in."""
        endpoints = await self.endpoints()
        query = urlencode({
            "response_type": "code", "client_id": self.client.client_id, "redirect_uri": pending.redirect_uri,
            "scope": " ".join(self.client.scopes), "state": pending.state, "nonce": pending.nonce,
            "code_challenge": pkce_challenge(pending.verifier), "code_challenge_method": "S256",
        }, quote_via=quote)
        return f"{endpoints.authorization}{'&' if '?' in endpoints.authorization else '?'}{query}"

    async def finish(self, pending: PendingLogin, code: str | None) -> tuple[Identity, str]:
        """The identity the IdP vouches for with ``code`` (and the ID token, for signing out)."""
        if not code or len(code) > 4096:
            raise SsoRefused("bad-code", "The identity provider sent no usable code. Start again.")
        endpoints = await self.endpoints()
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": pending.redirect_uri,
                "code_verifier": pending.verifier}
        headers = {"accept": "application/json"}
        secret = self.client.client_secret
        if secret is None:
            form["client_id"] = self.client.client_id
        elif self.client.token_auth_method == "client_secret_post":
            form.update(client_id=self.client.client_id, client_secret=secret)
        else:  # RFC 6749 section 2.3.1: each part form-encoded before the Basic encoding
            pair = f"{quote(self.client.client_id, safe='')}:{quote(secret, safe='')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        answer = await self._json("POST", endpoints.token, "token-refused", data=form, headers=headers)
        id_token = answer.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise SsoRefused("bad-id-token", "The identity provider sent no ID token (is 'openid' among the scopes?).",
                             502)
        claims = await self._verified(id_token, pending.nonce)
        try:
            identity = self._checker.identity_for_claims(self.client.issuer, claims)
        except CredentialError as exc:
            raise SsoRefused("not-allowed", f"The identity provider's account cannot sign in here: {exc}", 403) from exc
        return identity, id_token

    async def _verified(self, id_token: str, nonce: str) -> dict[str, Any]:
        try:
            claims = await self._checker.verify(id_token, issuer=self.client.issuer, audiences=[self.client.client_id])
        except CredentialError as exc:
            reason = getattr(exc, "reason", "")
            raise SsoRefused("bad-id-token", f"The ID token was refused{f' ({reason})' if reason else ''}.",
                             401) from exc
        got = claims.get("nonce")
        if not isinstance(got, str) or not hmac.compare_digest(got.encode(), nonce.encode()):
            raise SsoRefused("bad-nonce", "The ID token does not belong to this sign-in (its nonce differs).", 401)
        audiences = claims.get("aud")
        if isinstance(audiences, list) and len(audiences) > 1 and claims.get("azp") != self.client.client_id:
            # OpenID Connect Core 3.1.3.7: with several audiences, the token must be issued to us
            raise SsoRefused("bad-id-token", "The ID token was issued to another client (azp).", 401)
        return claims

    async def end_session_url(self, id_token: str | None, return_to: str) -> str | None:
        """Where to send the browser to sign out at the IdP too, if it says where (RP-initiated logout)."""
        try:
            endpoints = await self.endpoints()
        except SsoRefused:
            return None  # signed out here; the IdP cannot be asked now
        if endpoints.end_session is None:
            return None
        params = {"client_id": self.client.client_id, "post_logout_redirect_uri": return_to}
        if id_token:
            params["id_token_hint"] = id_token
        sep = "&" if "?" in endpoints.end_session else "?"
        return f"{endpoints.end_session}{sep}{urlencode(params, quote_via=quote)}"

    async def _json(self, method: str, url: str, reason: str, **kwargs: Any) -> dict[str, Any]:
        """A JSON object from the IdP: no redirects, at most ``MAX_SSO_RESPONSE_BYTES``, all within the timeout."""
        try:
            async with asyncio.timeout(SSO_HTTP_TIMEOUT_SECONDS), self._http.stream(method, url, **kwargs) as response:
                body = await read_capped(response, MAX_SSO_RESPONSE_BYTES)
                status = response.status_code
        except TooLarge:
            raise SsoRefused(reason, "The identity provider's answer is too large.", 502) from None
        except (httpx2.HTTPError, TimeoutError) as exc:  # the whole answer within the time, however it trickles
            raise SsoRefused(reason, "The identity provider cannot be reached. Try again shortly.", 502) from exc
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if status != 200 or not isinstance(doc, dict):
            said = error_word(doc.get("error") if isinstance(doc, dict) else None)
            raise SsoRefused(reason, f"The identity provider answered {status}{said}.", 502)
        return doc
