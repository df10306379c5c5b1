"""Parts for tests of upstream credentials with the real IdP: an upstream that verifies the bearer token it
receives with the IdP's JWKS, and a counting proxy of the IdP's token endpoint (so "one fetch" is counted
where requests arrive). Imported by name (``from upstream_identity_support import parts``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from idp_support import Idp, check_jwt
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["AUDIENCE", "WHOAMI", "CountingProxy", "Upstream", "assert_nowhere", "everything_logged", "parts"]

Json = dict[str, Any]
AUDIENCE = "https://whoami.test"  # the upstream's own audience: the tokens it accepts are issued for it
# The `http:` tools on ``Upstream``: the verified claims, and the request's headers echoed back.
WHOAMI = [{"name": "whoami", "method": "GET", "path": "/whoami"}, {"name": "echo", "method": "GET", "path": "/echo"}]


@dataclass
class Upstream:
    """The verifying API: the bearer tokens it received (kept to grep outputs for them) and the claims."""

    jwks: Json
    issuer: str
    tokens: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        """``GET /whoami``: the verified claims of the bearer token, or 401; ``GET /echo``: the headers."""

        async def whoami(request: Request) -> JSONResponse:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            self.tokens.append(token)
            try:
                claims = check_jwt(token, self.jwks, issuer=self.issuer, audience=AUDIENCE)
            except Exception as exc:  # any failed check: the upstream refuses, as a real one would
                return JSONResponse({"refused": type(exc).__name__}, status_code=401)
            return JSONResponse({"scheme": scheme, "sub": claims["sub"], "aud": claims["aud"],
                                 "client_id": claims.get("client_id"), "act": claims.get("act"),
                                 "scope": claims.get("scope")})

        async def echo(request: Request) -> JSONResponse:  # as httpbin's /headers does: the token comes back
            self.tokens.append(request.headers.get("authorization", "").partition(" ")[2])
            return JSONResponse({"headers": dict(request.headers)})

        return Starlette(routes=[Route("/whoami", whoami, methods=["GET"]), Route("/echo", echo, methods=["GET"])])


@dataclass
class CountingProxy:
    """Forwards token requests to the IdP and counts them (grant type of each)."""

    token_endpoint: str
    grants: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        """``POST /token``, forwarded to the IdP as it came."""

        async def token(request: Request) -> Response:
            body = await request.body()
            form = dict(httpx2.QueryParams(body.decode()))
            self.grants.append(form.get("grant_type", ""))
            headers = {k: v for k, v in request.headers.items() if k in ("authorization", "content-type")}
            async with httpx2.AsyncClient(timeout=15) as http:
                answer = await http.post(self.token_endpoint, content=body, headers=headers)
            return Response(answer.content, answer.status_code, media_type="application/json")

        return Starlette(routes=[Route("/token", token, methods=["POST"])])


@contextlib.asynccontextmanager
async def parts(idp: Idp) -> AsyncIterator[tuple[Upstream, CountingProxy, str, str]]:
    """The verifying upstream and the counting proxy, served; yields them and their URLs."""
    async with httpx2.AsyncClient() as http:
        jwks = (await http.get(idp.jwks_uri)).json()
    upstream, proxy = Upstream(jwks, idp.issuer), CountingProxy(idp.token_endpoint)
    async with serve_app(upstream.app(), lifespan="off") as api, serve_app(proxy.app(), lifespan="off") as token_url:
        yield upstream, proxy, api, f"{token_url}/token"


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every log record captured, with its traceback, as one text to grep."""
    # The test upstreams' own server side (an MCP server's debug log of the body it sends) is not the gateway's.
    theirs = ("sse_starlette", "mcp.server")
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records if not r.name.startswith(theirs))


def assert_nowhere(secrets: list[str], *places: str) -> None:
    """Fail if any of ``secrets`` (each non-empty) occurs in any of ``places``."""
    for secret in secrets:
        assert secret
        for place in places:
            assert secret not in place
