"""The RFC 9728 metadata document at /.well-known/oauth-protected-resource (and its path forms), on a real gateway.

Open (no credential: it is how a client learns where to get one), cacheable, the same whoever asks and
whatever Host they name; a gateway without `auth.resource_metadata` serves none.
"""

from __future__ import annotations

import httpx2
import pytest

pytestmark = pytest.mark.session_loop

RESOURCE = "https://gateway.example.com/tools/mcp"
META = {"resource": RESOURCE, "authorization_servers": ["https://idp.example.com", "https://idp2.example.com/t"],
        "scopes_supported": ["mcp", "tools.read"], "resource_name": "Acme tools",
        "resource_documentation": "https://docs.example.com/gateway"}
POLICY = {"p.yaml": "policy: p\nrules: [{id: r, action: allow}]\n"}
PATHS = ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
         "/.well-known/oauth-protected-resource/tools/mcp"]


def issuers(meta):
    """`auth.jwt` entries for the advertised issuers (never asked: every request here carries an API key or none)."""
    return [{"issuer": issuer, "audiences": [meta["resource"]]} for issuer in meta["authorization_servers"]]


def with_metadata(configs, meta=None, **auth):
    meta = meta or META
    return configs.base(auth={"api_keys": configs.api_keys("alice"), "jwt": issuers(meta), "resource_metadata": meta,
                              **auth})


@pytest.mark.parametrize("path", PATHS, ids=["root", "mcp", "resource-path"])
async def test_the_metadata_is_served_to_anyone_at_each_well_known_path(start_gateway, configs, path):
    gateway = await start_gateway(with_metadata(configs), POLICY)
    async with httpx2.AsyncClient(base_url=gateway.url) as http:
        response = await http.get(path)
        head = await http.head(path)
        with_bad_key = await http.get(path, headers={"Authorization": "Bearer not-a-key"})

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "public, max-age=3600"
    assert response.json() == {**META, "bearer_methods_supported": ["header"]}
    assert head.status_code == 200 and head.content == b""
    assert with_bad_key.status_code == 200  # an open route: a credential, good or bad, plays no part


async def test_the_document_does_not_follow_the_host_a_request_names(start_gateway, configs):
    gateway = await start_gateway(with_metadata(configs), POLICY)
    port = gateway.url.rsplit(":", 1)[1]
    async with httpx2.AsyncClient(base_url=gateway.url) as http:
        response = await http.get(PATHS[0], headers={"Host": f"localhost:{port}", "X-Forwarded-Host": "evil.example",
                                                     "Forwarded": "host=evil.example;proto=http"})

    assert response.status_code == 200
    assert response.json()["resource"] == RESOURCE


async def test_the_resource_host_is_served_like_the_public_url(start_gateway, configs):
    # clients reach the gateway at the resource's host: it must not be refused as a foreign Host (421)
    gateway = await start_gateway({**with_metadata(configs), "http": {"allowed_hosts": ["127.0.0.1"]}}, POLICY)
    async with httpx2.AsyncClient(base_url=gateway.url) as http:
        ours = await http.get(PATHS[0], headers={"Host": "gateway.example.com"})
        other = await http.get(PATHS[0], headers={"Host": "other.example.com"})

    assert ours.status_code == 200
    assert other.status_code == 421


async def test_only_get_and_head_serve_the_document(start_gateway, configs, keys):
    gateway = await start_gateway(with_metadata(configs), POLICY)
    async with httpx2.AsyncClient(base_url=gateway.url) as http:
        anonymous = await http.post(PATHS[1], json={})
        alice = await http.post(PATHS[1], json={}, headers={"Authorization": f"Bearer {keys['alice']}"})

    assert anonymous.status_code == 401  # a body from no one is refused before it is read (connection shares)
    assert alice.status_code == 404  # no POST route there: the protected app answers, as for any unknown path


async def test_a_gateway_without_resource_metadata_serves_no_document(start_gateway, configs):
    gateway = await start_gateway(configs.base(), POLICY)
    async with httpx2.AsyncClient(base_url=gateway.url) as http:
        response = await http.get(PATHS[0])

    assert response.status_code == 401  # nothing open there: the protected app asks for a key
    assert response.headers["www-authenticate"] == 'Bearer realm="gateway"'
