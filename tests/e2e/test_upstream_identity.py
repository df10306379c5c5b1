"""Upstream credentials from the real IdP (tests/idp_support.py: npm oidc-provider on loopback), end to end.

The gateway runs under uvicorn; its token requests go to the IdP through a counting proxy of ours on
loopback (so "one fetch" is counted where the requests arrive, not guessed); the upstream is a real HTTP API
that verifies the bearer token it receives with the IdP's JWKS (signature, issuer, ``aud`` = its own
audience, ``sub``) and answers with the claims it saw. Nothing the IdP issued, nor the client secret, reaches
the agent, the audit log or the logs.
"""

from __future__ import annotations

import contextlib
import json
import logging
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

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the harness lives

Json = dict[str, Any]
AUDIENCE = "https://whoami.test"
WHOAMI = [{"name": "whoami", "method": "GET", "path": "/whoami"}]
POLICIES = {"p.yaml": "policy: p\nrules: [{id: r, action: allow}]\n"}
SECRET_ENV = "TEST_IDP_SERVICE_SECRET"


@dataclass
class Upstream:
    """The verifying API: the bearer tokens it received (kept to grep outputs for them) and the claims."""

    jwks: Json
    issuer: str
    tokens: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
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

        return Starlette(routes=[Route("/whoami", whoami, methods=["GET"])])


@dataclass
class CountingProxy:
    """Forwards token requests to the IdP and counts them (grant type of each)."""

    token_endpoint: str
    grants: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
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
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)


def assert_nowhere(secrets: list[str], *places: str) -> None:
    for secret in secrets:
        assert secret
        for place in places:
            assert secret not in place


@pytest.fixture(autouse=True)
def service_secret(idp: Idp, monkeypatch: pytest.MonkeyPatch) -> str:
    assert idp.service.client_secret is not None
    monkeypatch.setenv(SECRET_ENV, idp.service.client_secret)
    return idp.service.client_secret


def client_credentials(idp: Idp, token_url: str | None = None) -> Json:
    where = {"token_url": token_url} if token_url else {"issuer": idp.issuer}
    return {"client_credentials": {**where, "client_id": idp.service.client_id,
                                   "client_secret": {"env": SECRET_ENV}, "resource": AUDIENCE, "scopes": ["read"]}}


async def test_client_credentials_the_upstream_verifies_the_gateways_own_token(
        idp, start_gateway, configs, rest, rest_call, call_id, caplog, service_secret):
    caplog.set_level(logging.DEBUG)
    async with parts(idp) as (upstream, proxy, api, token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp, token_url)})), POLICIES)
        alice, bob = rest(gateway, "alice"), rest(gateway, "bob")
        bodies = [await rest_call(alice, "who_whoami", {}), await rest_call(bob, "who_whoami", {}),
                  await rest_call(alice, "who_whoami", {}, call_id=call_id())]
    for body in bodies:
        assert body["is_error"] is False, body
        # the gateway's own token: its subject and client are the service client, its audience the upstream
        assert body["structured"] == {"scheme": "Bearer", "sub": idp.service.client_id, "aud": AUDIENCE,
                                      "client_id": idp.service.client_id, "act": None, "scope": "read"}
    assert proxy.grants == ["client_credentials"]  # one token request for three calls by two callers
    assert len(set(upstream.tokens)) == 1
    assert_nowhere([upstream.tokens[0], service_secret], json.dumps(bodies), gateway.audit_path.read_text(),
                   everything_logged(caplog))


async def test_client_credentials_found_by_discovery_at_the_issuer(idp, start_gateway, configs, rest, rest_call):
    async with parts(idp) as (_, _proxy, api, _token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp)})), POLICIES)
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {})
    assert body["structured"]["sub"] == idp.service.client_id and body["structured"]["aud"] == AUDIENCE


async def test_a_wrong_client_secret_fails_the_call_closed(idp, start_gateway, configs, rest, rest_call, call_id,
                                                          monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(SECRET_ENV, "not-the-secret-4471")
    async with parts(idp) as (upstream, _proxy, api, token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp, token_url)})), POLICIES)
        cid = call_id()
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {}, call_id=cid)
    assert body["is_error"] is True
    assert body["content"][0]["text"] == ("No credential for upstream 'who': the identity provider refused the token"
                                          " request (invalid_client). The tool did not run.")
    assert upstream.tokens == []
    assert gateway.audit_event(cid)["upstream_outcome"]["reached"] is False
    assert_nowhere(["not-the-secret-4471"], json.dumps(body), gateway.audit_path.read_text(),
                   everything_logged(caplog))
