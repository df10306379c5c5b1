"""MCP authorization end to end: real MCP clients with OAuth find the IdP from the gateway and call tools.

The gateway accepts only tokens of the IdP (tests/idp_support.py, npm oidc-provider) for its own MCP
endpoint, and publishes its RFC 9728 metadata. Each client starts with nothing but the gateway's URL; the
MCP Python SDK's and the TypeScript SDK's own OAuth providers take it from there (the 401, the metadata, the
IdP's metadata, dynamic client registration, PKCE with the resource indicator, the token), in the
2025-11-25 era and in the 2026-07-28 era. A token that lacks a required scope gets a 403
``insufficient_scope`` naming it, which both SDKs answer with a step-up sign-in; a token issued for
another resource (RFC 8707 audience) is refused with 401.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx2
import pytest
import pytest_asyncio
from oauth_clients import OAuthGateway, Seen, held_tokens, oauth_gateway, python_oauth_call, ts_oauth_call

POLICY = """
policy: p
rules:
  - id: leads-deploy
    tools: [ops_deploy]
    when: '!("leads" in principal.groups)'
    action: reject
    message: Only leads deploy.
"""
ERAS = ["legacy", "2026-07-28"]
VERSION = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}  # what each mode's requests say they speak


@pytest_asyncio.fixture(loop_scope="module")
async def gateway(tmp_path, upstream, idp) -> AsyncIterator[OAuthGateway]:
    """A gateway whose only callers are the IdP's users, with `mcp` required."""
    upstream.reset()
    async with oauth_gateway(tmp_path, upstream, idp, POLICY) as running:
        yield running


def metadata_url(gateway: OAuthGateway) -> str:
    return f"{gateway.url}/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize("mode", ERAS)
async def test_the_python_sdk_signs_in_by_itself_and_calls_a_tool(gateway, idp, upstream, mode):
    seen = Seen()
    result = await python_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "web"}, seen)

    assert not result.is_error, result
    assert upstream.ran("deploy", service="web") == 1
    assert VERSION[mode] in seen.versions  # the era asked for is the era spoken
    # it began with the gateway's 401, which named the metadata; it registered once and signed in once
    first = seen.responses[0]
    assert (first[0], first[1], first[2]) == ("POST", gateway.mcp_url, 401)
    assert f'resource_metadata="{metadata_url(gateway)}"' in first[3]
    assert any(url == metadata_url(gateway) and status == 200 for _, url, status, _ in seen.responses)
    assert len(seen.registered) == 1 and len(seen.sign_ins) == 1
    # the authorization request named the gateway's MCP endpoint as the resource, and the scope it advertises
    assert f"resource={httpx2.URL(gateway.mcp_url)}".replace(":", "%3A").replace("/", "%2F") in seen.sign_ins[0]
    assert "scope=mcp" in seen.sign_ins[0]


@pytest.mark.parametrize(("sdk", "mode"), [("v2", "legacy"), ("v2", "2026-07-28"), ("v1", "legacy")])
async def test_the_typescript_sdk_signs_in_by_itself_and_calls_a_tool(gateway, idp, upstream, sdk, mode):
    seen = Seen()
    answer = await ts_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": f"api-{sdk}"}, seen, sdk=sdk)

    assert "result" in answer, answer
    assert not answer["result"].get("isError"), answer
    assert upstream.ran("deploy", service=f"api-{sdk}") == 1
    assert VERSION[mode] in seen.versions  # the era asked for is the era spoken
    first = seen.responses[0]
    assert (first[1], first[2]) == (gateway.mcp_url, 401) and f'resource_metadata="{metadata_url(gateway)}"' in first[3]
    assert len(seen.registered) == 1 and len(seen.sign_ins) == 1
    assert "resource=" in seen.sign_ins[0] and "scope=mcp" in seen.sign_ins[0]


@pytest.mark.parametrize("mode", ERAS)
async def test_the_principal_is_the_signed_in_user(gateway, idp, upstream, mode):
    # mallory signs in just as well, and the policy sees her groups from the token: none, so no deploy
    result = await python_oauth_call(gateway, idp, "mallory", mode, "ops_deploy", {"service": "db"})

    assert result.is_error
    assert "Only leads deploy." in result.content[0].text  # type: ignore[union-attr]
    assert upstream.ran("deploy", service="db") == 0


@contextlib.asynccontextmanager
async def scoped_gateway(tmp_path, upstream, idp, required: str) -> AsyncIterator[OAuthGateway]:
    """A gateway that requires ``required`` besides `mcp`, and advertises only `mcp` in its metadata."""
    upstream.reset()
    async with oauth_gateway(tmp_path, upstream, idp, POLICY, jwt={"required_scopes": ["mcp", required]}) as gw:
        yield gw


def insufficient(gateway: OAuthGateway, scope: str) -> str:
    return (f'Bearer realm="gateway", error="insufficient_scope", scope="{scope}", '
            f'resource_metadata="{metadata_url(gateway)}"')


@pytest.mark.parametrize("client", ["python", "typescript"])
@pytest.mark.parametrize("mode", ERAS)
async def test_the_401_asks_for_every_required_scope_so_the_first_token_is_enough(tmp_path, upstream, idp, mode,
                                                                                   client):
    async with scoped_gateway(tmp_path, upstream, idp, "tools:write") as gateway:
        seen = Seen()
        if client == "python":
            result = await python_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "s1"}, seen)
            assert not result.is_error, result
            assert 'scope="mcp tools:write"' in seen.challenges(401)[0] and not seen.challenges(403)
        else:
            answer = await ts_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "s1"}, seen)
            assert "result" in answer and not answer["result"].get("isError"), answer

    assert upstream.ran("deploy", service="s1") == 1
    assert len(seen.sign_ins) == 1 and "scope=mcp+tools%3Awrite" in seen.sign_ins[0]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_granted_before_a_scope_was_required_gets_a_403_the_python_sdk_steps_up_from(
        tmp_path, upstream, idp, mode):
    async with scoped_gateway(tmp_path, upstream, idp, "tools:write") as gateway:
        held = await held_tokens(idp, gateway, "alice", "mcp")
        seen = Seen()
        result = await python_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "s2"}, seen, held)

    assert not result.is_error, result
    assert upstream.ran("deploy", service="s2") == 1
    assert seen.responses[0][2] == 403  # its first request, with the token it held
    assert seen.challenges(403) == [insufficient(gateway, "mcp tools:write")]
    assert len(seen.sign_ins) == 1 and "tools%3Awrite" in seen.sign_ins[0] and not seen.registered  # a step-up


@pytest.mark.parametrize("mode", ERAS)
async def test_a_token_granted_before_a_scope_was_required_gets_a_403_the_typescript_sdk_steps_up_from(
        tmp_path, upstream, idp, mode):
    async with scoped_gateway(tmp_path, upstream, idp, "tools:write") as gateway:
        held = await held_tokens(idp, gateway, "alice", "mcp")
        seen = Seen()
        answer = await ts_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "s3"}, seen, held)

    assert "result" in answer and not answer["result"].get("isError"), answer
    assert upstream.ran("deploy", service="s3") == 1
    assert len(seen.sign_ins) == 1 and "tools%3Awrite" in seen.sign_ins[0]
    assert set(seen.registered) <= {idp.public.client_id}  # no new registration (the SDK may save the one it has)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_scope_the_idp_never_grants_leaves_the_client_with_403_insufficient_scope(tmp_path, upstream, idp,
                                                                                         mode):
    # `tools:deploy` is no scope of the IdP's: a sign-in asking for it gets the rest, and the gateway keeps refusing
    # the token (the clients hold a registration already: the IdP would refuse to register one asking for it)
    async with scoped_gateway(tmp_path, upstream, idp, "tools:deploy") as gateway:
        seen = Seen()
        with pytest.raises(BaseException) as caught:  # the SDK wraps what it raises in exception groups
            await python_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "s4"}, seen,
                                    await held_tokens(idp, gateway, "alice", "mcp"))
        ts_seen = Seen()
        answer = await ts_oauth_call(gateway, idp, "alice", mode, "ops_deploy", {"service": "s4"}, ts_seen,
                                     await held_tokens(idp, gateway, "alice", "mcp"))

    assert caught.value is not None
    assert "error" in answer, answer
    for each in (seen, ts_seen):  # each client was told why, every time, and asked for the scope again
        assert each.challenges(403) and set(each.challenges(403)) == {insufficient(gateway, "mcp tools:deploy")}
        assert each.sign_ins and all("tools%3Adeploy" in url for url in each.sign_ins)
    assert upstream.ran("deploy", service="s4") == 0


async def test_a_raw_token_without_the_scope_is_refused_with_403_and_the_scope_named(tmp_path, upstream, idp):
    async with scoped_gateway(tmp_path, upstream, idp, "tools:write") as gateway:
        token = await idp.user_token("alice", resource=gateway.mcp_url, scope="mcp")
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            posted = await http.post(gateway.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                     headers={"Accept": "application/json, text/event-stream"})
            listed = await http.get(f"{gateway.url}/v1/tools")

    for response in (posted, listed):
        assert response.status_code == 403
        assert response.headers["www-authenticate"] == insufficient(gateway, "mcp tools:write")
        assert response.json()["error"]["code"] == "insufficient-scope"


async def test_a_token_for_another_resource_is_refused_with_401(gateway, idp, upstream):
    # a real token of the same IdP and user, with every scope, but issued for another resource (RFC 8707)
    other = gateway.mcp_url.replace("/mcp", "/other")
    token = await idp.user_token("alice", resource=other, scope="mcp")
    assert idp.verify(token, audience=other)["aud"] == other
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        posted = await http.post(gateway.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                 headers={"Accept": "application/json, text/event-stream"})
        called = await http.post(f"{gateway.url}/v1/tools/ops_deploy/invoke", json={"arguments": {"service": "x"}})

    for response in (posted, called):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == (
            f'Bearer realm="gateway", error="invalid_token", scope="mcp", resource_metadata="{metadata_url(gateway)}"')
        assert response.json()["error"]["code"] == "invalid-token"
    assert upstream.ran("deploy", service="x") == 0
