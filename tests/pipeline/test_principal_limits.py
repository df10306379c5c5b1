"""Per-principal limits (`limits.per_principal` in gateway.yaml): calls running at once and calls per
minute. A principal over its limit gets a refusal it can read (REST: 429 with Retry-After; MCP: an
isError result) and an audit event; other principals are not affected."""

from __future__ import annotations

import asyncio
import uuid

import httpx2
import pytest

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

NO_RULES = {"none.yaml": "policy: none\nrules: []\n"}


def _client(gateway, keys, who: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {keys[who]}"},
                              timeout=httpx2.Timeout(30))


async def test_calls_running_at_once_are_capped_per_principal(start_gateway, configs, http_api, keys, connect_mcp,
                                                              until):
    config = configs.base(configs.http_upstream("api", http_api.url),
                          limits={"per_principal": {"max_concurrent_calls": 2}})
    gateway = await start_gateway(config, NO_RULES)
    tag = f"busy-{uuid.uuid4().hex[:8]}"
    async with _client(gateway, keys, "alice") as alice, _client(gateway, keys, "bob") as bob:
        naps = [asyncio.create_task(alice.post("/v1/tools/api_nap/invoke", json={
            "call_id": f"{tag}-{i}", "arguments": {"seconds": 2, "tag": f"{tag}-{i}"}})) for i in range(4)]
        await until(lambda: _running(http_api, tag, 2))
        bobs = await bob.post("/v1/tools/api_search/invoke", json={"arguments": {"q": "bob is not limited"}})
        async with connect_mcp(gateway, "alice") as mcp:
            over_mcp = await mcp.call("api_search", {"q": "one more"}, call_id=f"{tag}-mcp")
        responses = await asyncio.gather(*naps)

    assert sorted(r.status_code for r in responses) == [200, 200, 429, 429]
    refused = [r for r in responses if r.status_code == 429]
    for response in refused:
        assert response.headers["retry-after"] == "1"
        body = response.json()
        assert (body["error"]["code"], body["decision"], body["is_error"]) == ("rate-limited", "rate_limited", True)
        assert "2 calls running" in body["content"][0]["text"]
        assert gateway.audit_event(body["call_id"])["verdict"] == "rate_limited"
    assert len(http_api.seen(tag)) == 2  # the refused calls never reached the upstream
    assert (bobs.status_code, bobs.json()["decision"]) == (200, "allow")
    assert over_mcp.is_error is True
    assert over_mcp.meta["gateway/decision"] == "rate_limited"
    assert gateway.audit_event(f"{tag}-mcp")["verdict"] == "rate_limited"


async def _running(http_api, tag: str, count: int) -> bool:
    return len(http_api.seen(tag)) >= count


async def test_calls_per_minute_are_capped_per_principal(start_gateway, configs, http_api, keys, connect_mcp):
    config = configs.base(configs.http_upstream("api", http_api.url),
                          limits={"per_principal": {"calls_per_minute": 3}})
    gateway = await start_gateway(config, NO_RULES)
    async with _client(gateway, keys, "alice") as alice, _client(gateway, keys, "bob") as bob:
        alices = [await alice.post("/v1/tools/api_search/invoke", json={"arguments": {"q": f"a{i}"}})
                  for i in range(4)]
        bobs = [await bob.post("/v1/tools/api_search/invoke", json={"arguments": {"q": f"b{i}"}}) for i in range(3)]
        async with connect_mcp(gateway, "alice") as mcp:
            over_mcp = await mcp.call("api_search", {"q": "mcp"})

    assert [r.status_code for r in alices] == [200, 200, 200, 429]
    assert 1 <= int(alices[3].headers["retry-after"]) <= 20  # one call every 20 s comes back
    assert "3 calls a minute" in alices[3].json()["error"]["message"]
    assert gateway.audit_event(alices[3].json()["call_id"])["verdict"] == "rate_limited"
    assert [r.status_code for r in bobs] == [200, 200, 200]
    assert (over_mcp.is_error, over_mcp.meta["gateway/decision"]) == (True, "rate_limited")
