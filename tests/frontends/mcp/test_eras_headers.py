"""MCP 2026-07-28 over HTTP, by hand: the routing headers ``Mcp-Method`` and ``Mcp-Name`` must match
the JSON-RPC body (400 with HeaderMismatch otherwise, before anything runs), and tools/list results
are marked private with a short TTL, never shareable across principals.
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp.client.caching import CacheConfig, CacheEntry, CacheKey, InMemoryResponseCacheStore
from mcp_types import HEADER_MISMATCH
from raw_mcp import MCP_HEADERS, message_of

from gateway.core.limits import TOOL_LIST_TTL_MS

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODERN = "2026-07-28"
# Only admins (alice) see up_secret.
ADMINS_ONLY_SECRET = """
policy: p
rules:
  - {id: admins-only, tools: [up_secret], when: '!("admins" in principal.groups)', action: reject, message: No.}
"""
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}


@contextlib.asynccontextmanager
async def _client(gateway: Any, key: str) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=httpx2.Timeout(30), headers={
            **MCP_HEADERS, "Authorization": f"Bearer {key}", "MCP-Protocol-Version": MODERN}) as http:
        yield http


def _body(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {**ENVELOPE, **(params or {}).pop("_meta", {})} if params else dict(ENVELOPE)
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": meta}}


def _call(text: str, call_id: str) -> dict[str, Any]:
    return _body("tools/call", {"name": "up_echo", "arguments": {"text": text}, "_meta": {"gateway/call_id": call_id}})


async def _post(http: httpx2.AsyncClient, body: dict[str, Any], headers: Any) -> httpx2.Response:
    return await http.post("/mcp", content=json.dumps(body).encode(), headers=headers)


async def test_matching_routing_headers_are_served(shared_gateway, keys):
    async with _client(shared_gateway, keys["alice"]) as http:
        response = await _post(http, _call("hello", f"c-{uuid.uuid4().hex}"),
                               {"Mcp-Method": "tools/call", "Mcp-Name": "up_echo"})
        assert response.status_code == 200, response.text
        assert message_of(response)["result"]["content"][0]["text"] == "hello"

        # a name sent in the base64 sentinel form is decoded before it is compared
        encoded = "=?base64?" + base64.b64encode(b"up_echo").decode() + "?="
        response = await _post(http, _call("again", f"c-{uuid.uuid4().hex}"),
                               {"Mcp-Method": "tools/call", "Mcp-Name": encoded})
        assert response.status_code == 200, response.text

        listed = await _post(http, _body("tools/list"), {"Mcp-Method": "tools/list"})
        assert listed.status_code == 200, listed.text


@pytest.mark.parametrize(("headers", "why"), [
    ({"Mcp-Method": "tools/list", "Mcp-Name": "up_echo"}, "mcp-method header does not match"),
    ({"Mcp-Name": "up_echo"}, "mcp-method header does not match"),  # missing
    ({"Mcp-Method": "Tools/Call", "Mcp-Name": "up_echo"}, "mcp-method header does not match"),  # values are exact
    ({"Mcp-Method": "tools/call", "Mcp-Name": "up_pid"}, "mcp-name header does not match"),
    ({"Mcp-Method": "tools/call"}, "mcp-name header does not match"),  # missing
    ({"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?" + base64.b64encode(b"up_pid").decode() + "?="},
     "mcp-name header does not match"),
    ({"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?not base64?="}, "mcp-name header does not match"),
    ([("Mcp-Method", "tools/call"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "up_echo")],
     "mcp-method header appears more than once"),
    ([("Mcp-Method", "tools/call"), ("Mcp-Name", "up_pid"), ("Mcp-Name", "up_echo")],
     "mcp-name header appears more than once"),
])
async def test_a_routing_header_that_does_not_match_the_body_gets_400_and_nothing_runs(
        shared_gateway, keys, call_id, headers, why):
    named = call_id()
    async with _client(shared_gateway, keys["alice"]) as http:
        response = await _post(http, _call("must not run", named), headers)

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == HEADER_MISMATCH
    assert why in error["message"]
    assert not [e for e in shared_gateway.audit_events() if e.get("call_id") == named]


async def test_the_protocol_version_header_must_match_the_envelope(shared_gateway, keys):
    async with _client(shared_gateway, keys["alice"]) as http:
        body = _body("tools/list")
        body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
        response = await _post(http, body, {"Mcp-Method": "tools/list"})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == HEADER_MISMATCH


async def test_a_tool_list_is_private_with_a_short_ttl(shared_gateway, keys):
    async with _client(shared_gateway, keys["alice"]) as http:
        listed = message_of(await _post(http, _body("tools/list"), {"Mcp-Method": "tools/list"}))["result"]

    assert listed["cacheScope"] == "private"
    assert listed["ttlMs"] == TOOL_LIST_TTL_MS


class _RecordingStore(InMemoryResponseCacheStore):
    """The SDK's in-memory response cache, recording the entries written (one per response fetched)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[CacheKey, CacheEntry]] = []

    async def set(self, key: CacheKey, entry: CacheEntry) -> None:
        self.written.append((key, entry))
        await super().set(key, entry)


async def test_a_shared_client_cache_never_serves_alices_list_to_bob(start_gateway, configs, connect_mcp):
    # Two SDK clients sharing one response cache, each in its own partition, trusting "public" entries
    # across partitions (share_public) as a multi-tenant agent host might: alice's list must not be served
    # to bob, who may not see up_secret.
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": ADMINS_ONLY_SECRET})
    store = _RecordingStore()

    def cache(who: str) -> CacheConfig:
        return CacheConfig(store=store, partition=who, target_id="gateway", share_public=True)

    async with connect_mcp(gateway, "alice", mode=MODERN, cache=cache("alice")) as alice, \
            connect_mcp(gateway, "bob", mode=MODERN, cache=cache("bob")) as bob:
        first = await alice.client.list_tools()
        assert "up_secret" in {t.name for t in first.tools}
        assert [entry.scope for _, entry in store.written] == ["private"]

        listed = await bob.client.list_tools()

        assert "up_secret" not in {t.name for t in listed.tools}
        assert len(store.written) == 2  # bob's list was fetched from the gateway, and cached for bob alone
        assert store.written[0][0].partition != store.written[1][0].partition
        # alice's second look within the TTL is her own cached entry: nothing fetched
        assert {t.name for t in (await alice.client.list_tools()).tools} == {t.name for t in first.tools}
        assert len(store.written) == 2
