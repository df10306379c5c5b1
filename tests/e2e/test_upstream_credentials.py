"""Upstream ``auth: client_credentials`` end to end: the gateway under uvicorn, a real loopback token endpoint
that counts its requests, and real upstreams (an HTTP API, an MCP server over streamable HTTP) that see the
bearer token. The token and the client secret reach the upstream only: never the agent, the audit log, the
logs or an error body. (Token exchange, with the real IdP and JWT callers: test_upstream_token_exchange.py.)
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pytest
from approval_support import CountingUpstream
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from token_endpoint import CLIENT_ID, CLIENT_SECRET, TokenEndpointApp
from upstream_identity_support import assert_nowhere, everything_logged

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the harness lives

Json = dict[str, Any]
WHOAMI = [{"name": "whoami", "method": "GET", "path": "/whoami"}]
ALLOW = {"p.yaml": "policy: p\nrules: [{id: r, action: allow}]\n"}


@dataclass
class Seen:
    """Authorization headers an upstream received, in order."""

    headers: list[str] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)  # values the upstream answers 401 from now on


def whoami_app(seen: Seen) -> Starlette:
    """An HTTP API that answers only a bearer token and says (without the token) that it saw one."""

    async def whoami(request: Request) -> JSONResponse:
        value = request.headers.get("authorization", "")
        seen.headers.append(value)
        if not value.startswith("Bearer issued-") or value in seen.revoked:
            return JSONResponse({"error": "no token"}, status_code=401)
        return JSONResponse({"authorized": True, "token_number": value.split("-")[1]})

    return Starlette(routes=[Route("/whoami", whoami, methods=["GET"])])


class RequireBearer:
    """ASGI middleware in front of an MCP server: every request must carry a bearer token issued by the IdP."""

    def __init__(self, app: ASGIApp, seen: Seen) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            value = dict(scope["headers"]).get(b"authorization", b"").decode()
            self.seen.headers.append(value)
            if not value.startswith("Bearer issued-"):
                await JSONResponse({"error": "no token"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class EchoingUpstream(CountingUpstream):
    """The counting MCP server plus ``whoami``, a debug tool that echoes the Authorization header it got."""

    def reset(self) -> None:
        super().reset()
        self.tools["whoami"] = types.Tool(name="whoami", input_schema={"type": "object"})

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != "whoami":
            return await super()._call_tool(ctx, params)
        sent = ctx.request.headers.get("authorization", "") if ctx.request is not None else ""
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"you sent {sent}")],
                                    structured_content={"authorization": sent})


@contextlib.asynccontextmanager
async def token_endpoint(idp: TokenEndpointApp) -> AsyncIterator[str]:
    async with serve_app(idp.app(), lifespan="off") as url:
        idp.issuer = url
        yield url


def grant(url: str) -> Json:
    return {"client_credentials": {"token_url": f"{url}/token", "client_id": CLIENT_ID,
                                   "client_secret": {"env": "TEST_UPSTREAM_CLIENT_SECRET"},
                                   "resource": "https://whoami.example.com", "scopes": ["whoami"]}}


@pytest.fixture(autouse=True)
def client_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_UPSTREAM_CLIENT_SECRET", CLIENT_SECRET)


async def test_an_http_upstream_gets_the_gateways_token_fetched_once(start_gateway, configs, rest, rest_call,
                                                                    call_id, caplog):
    caplog.set_level(logging.DEBUG)
    idp, seen = TokenEndpointApp(), Seen()
    async with token_endpoint(idp) as idp_url, serve_app(whoami_app(seen), lifespan="off") as api:
        gateway = await start_gateway(configs.base(configs.http_upstream("who", api, WHOAMI,
                                                                         {"auth": grant(idp_url)})),
                                      ALLOW)
        client = rest(gateway, "alice")
        cids = [call_id(), call_id()]
        bodies = [await rest_call(client, "who_whoami", {}, call_id=cid) for cid in cids]
        bob = await rest_call(rest(gateway, "bob"), "who_whoami", {})
    assert [b["structured"] for b in [*bodies, bob]] == [{"authorized": True, "token_number": "1"}] * 3
    assert len(idp.requests) == 1  # one token for every caller, until it nears expiry
    assert idp.requests[0]["grant_type"] == "client_credentials"
    assert idp.requests[0]["resource"] == "https://whoami.example.com"
    assert seen.headers == ["Bearer issued-1-for-the-gateway"] * 3
    token = "issued-1-for-the-gateway"
    assert_nowhere([token, CLIENT_SECRET], json.dumps(bodies), json.dumps(bob), gateway.audit_path.read_text(),
                   everything_logged(caplog))


async def test_a_refused_token_request_fails_the_call_closed_naming_no_secret(start_gateway, configs, rest,
                                                                             rest_call, call_id, caplog):
    caplog.set_level(logging.DEBUG)
    idp, seen = TokenEndpointApp(refuse="invalid_scope"), Seen()
    async with token_endpoint(idp) as idp_url, serve_app(whoami_app(seen), lifespan="off") as api:
        gateway = await start_gateway(configs.base(configs.http_upstream("who", api, WHOAMI,
                                                                         {"auth": grant(idp_url)})),
                                      ALLOW)
        cid = call_id()
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {}, call_id=cid)
    assert body["is_error"] is True and body["decision"] == "tool_failed"
    assert body["content"][0]["text"] == ("No credential for upstream 'who': the identity provider refused the token"
                                          " request (invalid_scope). The tool did not run.")
    assert seen.headers == []  # nothing reached the upstream
    event = gateway.audit_event(cid)
    assert event["upstream_outcome"]["reached"] is False and "invalid_scope" in event["upstream_outcome"]["error"]
    assert_nowhere([CLIENT_SECRET], json.dumps(body), gateway.audit_path.read_text(), everything_logged(caplog))


async def test_an_mcp_upstream_over_http_gets_the_token_on_every_request(start_gateway, configs, connect_mcp,
                                                                        call_id, caplog):
    caplog.set_level(logging.DEBUG)
    idp, seen, upstream = TokenEndpointApp(), Seen(), EchoingUpstream()
    async with token_endpoint(idp) as idp_url, serve_app(RequireBearer(upstream.app(), seen)) as mcp_url:
        gateway = await start_gateway(configs.base({"name": "ops", "mcp": {"url": f"{mcp_url}/mcp",
                                                                           "auth": grant(idp_url)}}),
                                      ALLOW)
        async with connect_mcp(gateway, "alice") as conn:
            first = await conn.call("ops_deploy", {"service": "web"}, call_id=call_id())
            second = await conn.call("ops_deploy", {"service": "api"}, call_id=call_id())
            echoed = await conn.call("ops_whoami", {}, call_id=call_id())
    assert (first.is_error, second.is_error) == (False, False)
    # a tool that echoes its token does not hand it to the agent
    assert echoed.structured_content == {"authorization": "Bearer [redacted]"}
    assert echoed.content[0].text == "you sent Bearer [redacted]"
    assert upstream.ran("deploy") == 2
    assert seen.headers and set(seen.headers) == {"Bearer issued-1-for-the-gateway"}  # the handshake too
    assert len(idp.requests) == 1
    results = json.dumps([r.model_dump(mode="json") for r in (first, second, echoed)])
    assert_nowhere(["issued-1-for-the-gateway", CLIENT_SECRET], results, gateway.audit_path.read_text(),
                   everything_logged(caplog))


async def test_an_upstream_that_refuses_the_token_gets_a_fresh_one_next_time(start_gateway, configs, rest,
                                                                            rest_call):
    idp, seen = TokenEndpointApp(), Seen()
    async with token_endpoint(idp) as idp_url, serve_app(whoami_app(seen), lifespan="off") as api:
        gateway = await start_gateway(configs.base(configs.http_upstream("who", api, WHOAMI,
                                                                         {"auth": grant(idp_url)})),
                                      ALLOW)
        client = rest(gateway, "alice")
        first = await rest_call(client, "who_whoami", {})
        seen.revoked.add("Bearer issued-1-for-the-gateway")  # the upstream stops taking it (revoked, say)
        refused = await rest_call(client, "who_whoami", {})
        again = await rest_call(client, "who_whoami", {})
    assert (first["is_error"], refused["is_error"], again["is_error"]) == (False, True, False)
    assert again["structured"] == {"authorized": True, "token_number": "2"}
    assert len(idp.requests) == 2


WHOAMI_SPEC = """\
openapi: 3.0.3
info: {title: whoami, version: "1"}
paths:
  /whoami:
    get:
      operationId: whoami
      responses: {"200": {description: who the caller is}}
"""


async def test_an_openapi_upstream_gets_the_token_too(start_gateway, configs, rest, rest_call, tmp_path):
    idp, seen = TokenEndpointApp(), Seen()
    root = tmp_path / "openapi-gateway"
    root.mkdir()
    (root / "whoami.yaml").write_text(WHOAMI_SPEC)
    async with token_endpoint(idp) as idp_url, serve_app(whoami_app(seen), lifespan="off") as api:
        upstream = {"name": "who", "openapi": {"spec": "whoami.yaml", "base_url": api, "auth": grant(idp_url)}}
        gateway = await start_gateway(configs.base(upstream), ALLOW, root=root)
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {})
    assert body["structured"] == {"authorized": True, "token_number": "1"}
    assert seen.headers == ["Bearer issued-1-for-the-gateway"]
