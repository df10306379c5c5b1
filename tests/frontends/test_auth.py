"""Who may call: API keys on /mcp and /v1/*, an open /healthz, the anonymous principal only when
configured, and principal groups reaching the policies (calls and tool listings)."""

from __future__ import annotations

import httpx2
import pytest
from mcp import MCPError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "probe", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

REQUESTS = [
    ("POST", "/mcp", INITIALIZE),
    ("GET", "/v1/tools", None),
    ("GET", "/v1/policies", None),
    ("POST", "/v1/tools/up_echo/invoke", {"arguments": {"text": "hi"}}),
]


@pytest.mark.parametrize("credentials", [{}, {"Authorization": "Bearer not-a-key"}, {"X-API-Key": "not-a-key"},
                                         {"Authorization": "Basic YWxpY2U6cHc="}], ids=["none", "wrong-bearer",
                                                                                       "wrong-x-api-key", "basic"])
async def test_requests_without_a_valid_key_get_401(shared_gateway, credentials):
    async with httpx2.AsyncClient(base_url=shared_gateway.url, headers={**MCP_HEADERS, **credentials}) as http:
        for method, path, body in REQUESTS:
            response = await http.request(method, path, json=body)
            assert response.status_code == 401, (method, path)
            # a credential that was sent and refused is an invalid token (RFC 6750 section 3.1); none, no error code
            challenge = 'Bearer realm="gateway"' + (', error="invalid_token"' if credentials else "")
            assert response.headers["www-authenticate"] == challenge
            assert response.json()["error"]["code"] == "unauthorized"


async def test_valid_keys_are_accepted_as_bearer_or_x_api_key(shared_gateway, keys):
    for headers in ({"Authorization": f"Bearer {keys['bob']}"}, {"X-API-Key": keys["bob"]}):
        async with httpx2.AsyncClient(base_url=shared_gateway.url, headers={**MCP_HEADERS, **headers}) as http:
            assert (await http.get("/v1/tools")).status_code == 200
            response = await http.post("/mcp", json=INITIALIZE)
            assert response.status_code == 200
            assert response.headers["mcp-session-id"]


async def test_healthz_needs_no_key(shared_gateway):
    async with httpx2.AsyncClient(base_url=shared_gateway.url) as http:
        response = await http.get("/healthz")

    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["revision"] == shared_gateway.gateway.policies.current.revision


async def test_an_mcp_client_without_a_key_cannot_connect(shared_gateway, connect_mcp):
    with pytest.raises(BaseException) as caught:  # the SDK wraps what it raises in exception groups
        async with connect_mcp(shared_gateway, None):
            pass

    leaf = caught.value
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, MCPError)  # the SDK's client reports the 401 as a failed initialize


async def test_the_anonymous_principal_acts_only_when_configured(start_gateway, configs, http_api, rest, rest_call,
                                                                 call_id):
    gateway = await start_gateway(
        configs.base(configs.http_upstream("api", http_api.url),
                     auth={"api_keys": configs.api_keys("alice"),
                           "anonymous": {"id": "guest", "groups": ["visitors"]}}),
        {"p.yaml": """
            policy: p
            rules:
              - id: visitors-read-only
                when: '"visitors" in principal.groups && !tool.annotations.readOnlyHint'
                action: reject
                message: Visitors may only read.
        """})
    anonymous, alice = rest(gateway, who=None), rest(gateway, who="alice")

    cid = call_id()
    read = await rest_call(anonymous, "api_get_item", {"item_id": "anon-1"}, call_id=cid)
    write = await rest_call(anonymous, "api_create_item", {"name": "anon-2"})
    assert (read["_status"], read["is_error"]) == (200, False)
    assert (write["is_error"], write["content"][0]["text"]) == (True, "Visitors may only read.")
    assert gateway.audit_event(cid)["principal"] == {"id": "guest", "groups": ["visitors"], "kind": "anonymous"}
    assert (await rest_call(alice, "api_create_item", {"name": "alice-3"}))["is_error"] is False
    # a wrong key is refused: it does not fall back to the anonymous principal
    wrong = await rest(gateway, who=None).post("/v1/tools/api_get_item/invoke", json={"arguments": {"item_id": "x"}},
                                               headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    # visible tools follow the same static rule
    listed = {t["name"] for t in (await anonymous.get("/v1/tools")).json()["tools"]}
    assert listed == {"api_get_item"}


async def test_principal_groups_reach_the_policies(shared_gateway, connect_mcp):
    async with connect_mcp(shared_gateway, "bob") as bob, connect_mcp(shared_gateway, "alice") as alice:
        refused = await bob.call("up_secret")
        allowed = await alice.call("up_secret")

    assert (refused.is_error, refused.content[0].text) == (True, "Only admins may read secrets.")
    assert allowed.is_error is False
    assert "ops@example.com" in allowed.content[0].text


async def test_tools_list_hides_what_a_static_rule_refuses_for_this_principal(shared_gateway, connect_mcp, rest):
    async with connect_mcp(shared_gateway, "bob") as bob, connect_mcp(shared_gateway, "alice") as alice:
        bob_tools, alice_tools = await bob.tool_names(), await alice.tool_names()

    assert "up_secret" not in bob_tools
    assert "up_secret" in alice_tools
    assert alice_tools - bob_tools == {"up_secret"}
    rest_bob = {t["name"] for t in (await rest(shared_gateway, who="bob").get("/v1/tools")).json()["tools"]}
    rest_alice = {t["name"] for t in (await rest(shared_gateway, who="alice").get("/v1/tools")).json()["tools"]}
    assert (rest_bob, rest_alice) == (bob_tools, alice_tools)
