"""Two issuers whose tokens both say ``sub: alice``, for the tests that check two such alices share nothing.

Issuer A is the real OpenID Provider of the tests (``idp``, tests/idp_support.py). Issuer B is an issuer of our
own: RSA keys made here, served as a JWKS with discovery on loopback, signing access tokens the way an IdP does
(``typ: at+jwt``, ``aud`` the gateway's resource). ``second_issuer`` serves it (a fixture: conftest.py loads
this module as a plugin); ``two_issuers_auth`` is the ``auth`` section naming both; ``alices`` their two tokens.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from joserfc import jwt
from joserfc.jwk import RSAKey
from loopback import serve_app
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

AUDIENCE = "https://gateway.test/mcp"


class SecondIssuer:
    """An issuer of our own on loopback: discovery, a JWKS, and access tokens signed with its key."""

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "b-1", "alg": "RS256", "use": "sig"})
        self.issuer = ""

    def app(self) -> Starlette:
        async def discovery(_: Any) -> JSONResponse:
            return JSONResponse({"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks"})

        async def jwks(_: Any) -> JSONResponse:
            return JSONResponse({"keys": [self.key.as_dict(private=False)]})

        return Starlette(routes=[Route("/.well-known/openid-configuration", discovery), Route("/jwks", jwks)])

    def token(self, sub: str, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.issuer, "sub": sub, "aud": AUDIENCE, "iat": now, "nbf": now, "exp": now + 600,
                   "jti": uuid.uuid4().hex, "groups": ["eng"], "scope": "mcp", **claims}
        return jwt.encode({"alg": "RS256", "typ": "at+jwt", "kid": "b-1"}, payload, self.key)


def jwt_authenticator(issuer: str, **extra: Any) -> dict[str, Any]:
    """One ``auth.jwt`` entry for ``issuer``: its tokens for the gateway's resource, ``sub`` the principal's id."""
    return {"issuer": issuer, "audiences": [AUDIENCE], "algorithms": ["RS256"],
            "principal": {"id": "claims.sub", "groups": "has(claims.groups) ? claims.groups : []"}, **extra}


def claims_of(token: str) -> dict[str, Any]:
    """A token's payload, unverified (the test reads what it was given)."""
    part = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return claims


def two_issuers_auth(idp: Any, second: SecondIssuer, api_keys: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``auth`` section: both issuers, and the API keys beside them."""
    return {"api_keys": api_keys,
            "jwt": [jwt_authenticator(idp.issuer), jwt_authenticator(second.issuer, jwks_uri=f"{second.issuer}/jwks")]}


async def alices(idp: Any, second: SecondIssuer) -> tuple[str, str]:
    """Alice's token from issuer A and alice's from issuer B: the same ``sub``, two people."""
    token_a = await idp.user_token("alice", resource=AUDIENCE, scope="openid mcp")
    token_b = second.token("alice")
    assert claims_of(token_a)["sub"] == claims_of(token_b)["sub"] == "alice"
    return token_a, token_b


def bearer(token: str) -> dict[str, str]:
    """The Authorization header for a token."""
    return {"Authorization": f"Bearer {token}"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def second_issuer() -> AsyncIterator[SecondIssuer]:
    """Issuer B, served in the session loop (where the gateway runs) for the module."""
    second = SecondIssuer()
    async with serve_app(second.app(), lifespan="off") as url:
        second.issuer = url
        yield second
