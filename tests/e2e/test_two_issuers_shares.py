"""Two issuers' ``sub: alice`` and the per-principal shares of the gateway: one alice filling her share of the
gateway's connections, or of its held calls, leaves the other alice's share whole (gateway/frontends/http/
shares.py, gateway/pipeline/lifecycle.py).

Issuer A is the real OpenID Provider (``idp``), issuer B a loopback JWKS of our own (tests/two_issuers_support.py);
the gateway is served from its config with small caps, over real HTTP, in front of the test REST API.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from raw_mcp import INITIALIZE, MCP_HEADERS
from two_issuers_support import alices, bearer, two_issuers_auth

from gateway.auth.keys import hash_key

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

CAROL_KEY = "two-issuers-carol-key-5e1"
PER_PRINCIPAL = 2  # requests open at once
HELD_SHARE = 1  # calls held for approval at once
POLICY = """
policy: shares
rules:
  - id: deletes-need-carol
    tools: [api_delete_item]
    action: approve
    message: Deletes need carol.
    approval: {approvers: [carol], timeout: 600s, hold: 60s}
"""


@pytest_asyncio.fixture(loop_scope="session")
async def two_alices(idp, second_issuer, start_gateway, configs, http_api):
    """(gateway, alice's Authorization header from issuer A, alice's from issuer B)."""
    carol = {"principal": {"id": "carol"}, "sha256": hash_key(CAROL_KEY), "approver": True}
    config = configs.base(
        configs.http_upstream("api", http_api.url), auth=two_issuers_auth(idp, second_issuer, [carol]),
        limits={"call_timeout": 10, "per_principal": {"max_held_calls": HELD_SHARE}},
        http={"max_connections": 40, "max_connections_per_principal": PER_PRINCIPAL, "reserved_connections": 4})
    gateway = await start_gateway(config, {"p.yaml": POLICY})
    token_a, token_b = await alices(idp, second_issuer)
    return gateway, bearer(token_a), bearer(token_b)


def _client(gateway: Any, headers: dict[str, str]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=gateway.url, headers=headers, timeout=httpx2.Timeout(30, read=300),
                              limits=httpx2.Limits(max_connections=20))


async def _open_stream(stack: contextlib.AsyncExitStack, http: httpx2.AsyncClient) -> int:
    """A new MCP session and its ``GET /mcp`` stream, left open until ``stack`` closes: the stream's status."""
    init = await http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert init.status_code == 200, init.text
    session = init.headers["mcp-session-id"]
    await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers={**MCP_HEADERS, "Mcp-Session-Id": session})
    request = http.build_request("GET", "/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": session})
    response = await http.send(request, stream=True)
    stack.push_async_callback(response.aclose)
    return response.status_code


async def test_one_issuers_alice_filling_her_connection_share_leaves_the_others(two_alices):
    gateway, alice_a, alice_b = two_alices
    async with _client(gateway, alice_a) as a, _client(gateway, alice_b) as b, contextlib.AsyncExitStack() as held:
        a_streams = [await _open_stream(held, a) for _ in range(PER_PRINCIPAL)]
        over = await a.get("/v1/tools")
        b_streams = [await _open_stream(held, b) for _ in range(PER_PRINCIPAL)]
    assert a_streams == [200] * PER_PRINCIPAL
    assert (over.status_code, over.json()["error"]["code"]) == (429, "connection-share")
    assert b_streams == [200] * PER_PRINCIPAL  # her own share, not what is left of the other alice's


async def _held_delete(http: httpx2.AsyncClient, item: str) -> httpx2.Response:
    """A call that needs carol, held on its connection until she decides (REST ``?wait=``)."""
    return await http.post("/v1/tools/api_delete_item/invoke", params={"wait": "300s"},
                           json={"arguments": {"item_id": item}, "call_id": f"c-{item}"})


async def _pending(carol: httpx2.AsyncClient, call_id: str) -> str | None:
    listing = (await carol.get("/v1/approvals", params={"state": "pending"})).json()["approvals"]
    found = [a["id"] for a in listing if a["call_id"] == call_id]
    return found[0] if found else None


async def test_one_issuers_alice_filling_her_held_calls_leaves_the_others(two_alices, until):
    gateway, alice_a, alice_b = two_alices
    tag = uuid.uuid4().hex[:8]
    async with _client(gateway, alice_a) as a, _client(gateway, alice_b) as b, \
            _client(gateway, bearer(CAROL_KEY)) as carol:
        a_held = asyncio.create_task(_held_delete(a, f"{tag}-a"))
        await until(lambda: _pending(carol, f"c-{tag}-a"))
        a_over = await _held_delete(a, f"{tag}-a-over")  # past A's held share: answered "pending" at once
        b_held = asyncio.create_task(_held_delete(b, f"{tag}-b"))
        b_approval = await until(lambda: _pending(carol, f"c-{tag}-b"))
        vote = await carol.post(f"/v1/approvals/{b_approval}/decision", json={"approve": True})
        b_answer = await asyncio.wait_for(b_held, 30)
        a_held.cancel()
        await asyncio.gather(a_held, return_exceptions=True)
    assert (a_over.status_code, a_over.json()["decision"]) == (202, "pending")
    assert vote.status_code == 200
    # B's call was held on its connection until carol decided: A's held call did not use up B's share
    assert (b_answer.status_code, b_answer.json()["decision"]) == (200, "approve")
