"""The WWW-Authenticate of every refusal (gateway/frontends/challenge.py), on a real gateway with API keys.

Each 401 names the resource metadata when it is configured, so an MCP client can start its OAuth
discovery from any refused request: /mcp (whose bodies are refused before they are read, by the
connection shares), the REST API and /metrics alike. A credential that was sent and refused says
``invalid_token``; the URL comes from the config, never from the request.
"""

from __future__ import annotations

import httpx2
import pytest
import pytest_asyncio

from gateway.core.errors import AmbiguousCredentials, CredentialError, TokenRefused
from gateway.frontends.challenge import PLAIN, Challenge

pytestmark = pytest.mark.session_loop

RESOURCE = "http://127.0.0.1:9/mcp"
METADATA_URL = "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"
POLICY = {"p.yaml": "policy: p\nrules: [{id: r, action: allow}]\n"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "p", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}

CHALLENGE = f'Bearer realm="gateway", scope="mcp tools.read", resource_metadata="{METADATA_URL}"'
REFUSED = f'Bearer realm="gateway", error="invalid_token", scope="mcp tools.read", resource_metadata="{METADATA_URL}"'


@pytest_asyncio.fixture(loop_scope="session")
async def gateway(start_gateway, configs):
    meta = {"resource": RESOURCE, "authorization_servers": ["https://idp.example.com"],
            "scopes_supported": ["mcp", "tools.read"]}
    issuers = [{"issuer": "https://idp.example.com", "audiences": [RESOURCE]}]  # never asked: no request has a JWT
    return await start_gateway(configs.base(auth={"api_keys": configs.api_keys("alice"), "jwt": issuers,
                                                  "resource_metadata": meta},
                                            metrics={"enabled": True}), POLICY)


REQUESTS = [("POST", "/mcp", INITIALIZE), ("GET", "/mcp", None), ("GET", "/v1/tools", None),
            ("POST", "/v1/tools/x/invoke", {"arguments": {}}), ("GET", "/metrics", None)]


@pytest.mark.parametrize(("credentials", "expected"), [
    ({}, CHALLENGE),
    ({"Authorization": "Bearer not-a-key"}, REFUSED),
    ({"X-API-Key": "not-a-key"}, REFUSED),
    ({"Authorization": "Basic YWxpY2U6cHc="}, REFUSED),
    ({"Authorization": "Bearer"}, REFUSED),
], ids=["none", "unknown-bearer", "unknown-x-api-key", "basic", "empty"])
async def test_every_401_names_the_resource_metadata(gateway, credentials, expected):
    async with httpx2.AsyncClient(base_url=gateway.url, headers={**MCP_HEADERS, **credentials}) as http:
        for method, path, body in REQUESTS:
            response = await http.request(method, path, json=body)
            assert response.status_code == 401, (method, path)
            assert response.headers.get_list("www-authenticate") == [expected], (method, path)


async def test_two_credentials_are_an_invalid_request_with_the_metadata_still_named(gateway, keys):
    headers = {"Authorization": f"Bearer {keys['alice']}", "X-API-Key": keys["alice"]}
    async with httpx2.AsyncClient(base_url=gateway.url, headers={**MCP_HEADERS, **headers}) as http:
        posted = await http.post("/mcp", json=INITIALIZE)
        got = await http.get("/v1/tools")

    for response in (posted, got):
        assert response.status_code == 400
        assert response.headers["www-authenticate"] == REFUSED.replace("invalid_token", "invalid_request")


async def test_the_metadata_url_does_not_follow_the_host_a_request_names(gateway):
    port = gateway.url.rsplit(":", 1)[1]
    async with httpx2.AsyncClient(base_url=gateway.url, headers=MCP_HEADERS) as http:
        response = await http.post("/mcp", json=INITIALIZE, headers={"Host": f"localhost:{port}",
                                                                     "X-Forwarded-Host": "evil.example"})

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == CHALLENGE


async def test_a_known_key_is_not_challenged(gateway, keys):
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as http:
        response = await http.get("/v1/tools")

    assert response.status_code == 200
    assert "www-authenticate" not in response.headers


def test_without_resource_metadata_a_challenge_names_only_the_scheme_and_the_error():
    assert PLAIN.header(None, presented=False) == b'Bearer realm="gateway"'
    assert PLAIN.header(None, presented=True) == b'Bearer realm="gateway", error="invalid_token"'
    assert PLAIN.header(CredentialError("no"), presented=True) == b'Bearer realm="gateway", error="invalid_token"'
    two = AmbiguousCredentials("two")
    assert PLAIN.header(two, presented=True) == b'Bearer realm="gateway", error="invalid_request"'


def test_a_scope_never_breaks_out_of_its_quoted_string():
    header = Challenge("https://g.example.com/.well-known/oauth-protected-resource/mcp", 'mcp" evil="1\\').header(
        None, presented=False)
    assert header.count(b'"') == 6  # realm, scope and resource_metadata: three quoted strings, nothing else


def test_insufficient_scope_names_every_scope_needed_and_the_metadata():
    challenge = Challenge("https://g.example.com/.well-known/oauth-protected-resource/mcp", "mcp tools:write")
    lacking = TokenRefused("insufficient-scope", scope="tools:write admin")
    assert lacking.status == 403
    assert challenge.header(lacking, presented=True) == (
        b'Bearer realm="gateway", error="insufficient_scope", scope="mcp tools:write admin",'
        b' resource_metadata="https://g.example.com/.well-known/oauth-protected-resource/mcp"')
    assert PLAIN.header(lacking, presented=True) == (
        b'Bearer realm="gateway", error="insufficient_scope", scope="tools:write admin"')


@pytest.mark.parametrize("reason", ["expired", "bad-audience", "unknown-issuer", "keys-unavailable", "malformed"])
def test_every_other_refused_token_is_an_invalid_token(reason):
    refused = TokenRefused(reason)
    assert refused.status == 401
    assert PLAIN.header(refused, presented=True) == b'Bearer realm="gateway", error="invalid_token"'
