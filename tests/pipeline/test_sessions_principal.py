"""Sessions belong to their principal: an `X-Gateway-Session` value, a REST `session_id` and an MCP
session are scoped to the principal that created them, and one key cannot open sessions without end.

alice plays the attacker throughout: she names bob's sessions, and uses bob's Mcp-Session-Id.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid

import httpx2
import pytest
from raw_mcp import INITIALIZE, MCP_HEADERS, RawMcp, message_of

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

POLICY = """
policy: sessions
rules:
  - id: stop-word
    tools: [api_search]
    when: args.q == "stop"
    action: terminate
    message: Session ended by policy.
  - id: budget
    tools: [api_search]
    when: session.calls >= 2
    action: reject
    message: This session has used its budget of 2 calls.
"""


@pytest.fixture
def gateway_config(configs, http_api):
    return configs.base(configs.http_upstream("api", http_api.url))


def _client(gateway, keys, who: str, session: str | None = None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {keys[who]}"} | ({"X-Gateway-Session": session} if session else {})
    return httpx2.AsyncClient(base_url=gateway.url, headers=headers, timeout=httpx2.Timeout(30))


async def _search(client: httpx2.AsyncClient, q: str, **body: str) -> str:
    response = await client.post("/v1/tools/api_search/invoke", json={"arguments": {"q": q}, **body})
    assert response.status_code == 200, response.text
    decision: str = response.json()["decision"]
    return decision


async def test_naming_another_principals_session_cannot_terminate_it(start_gateway, gateway_config, keys):
    gateway = await start_gateway(gateway_config, {"sessions.yaml": POLICY})
    # bob's default session id is his principal id: alice names it in the header, and in the body
    async with _client(gateway, keys, "alice", session="bob") as alice, _client(gateway, keys, "bob") as bob:
        attack = [await _search(alice, "stop"), await _search(alice, "hello"),
                  await _search(alice, "hello", session_id="bob")]
        victim = [await _search(bob, "hello"), await _search(bob, "hello", session_id="bob")]

    assert attack == ["terminate", "terminated", "terminated"]  # alice ended her own session named "bob"
    assert victim == ["allow", "allow"]  # bob's session was never touched
    events = [e for e in gateway.audit_events() if e["session"] == "bob"]
    assert {e["principal"]["id"] for e in events if e["verdict"] in ("terminate", "terminated")} == {"alice"}


async def test_another_principals_session_counters_are_not_shared(start_gateway, gateway_config, keys):
    gateway = await start_gateway(gateway_config, {"sessions.yaml": POLICY})
    shared = f"s-{uuid.uuid4().hex}"
    async with _client(gateway, keys, "bob", shared) as bob, _client(gateway, keys, "alice", shared) as alice:
        bobs = [await _search(bob, f"q{i}") for i in range(3)]
        alices = [await _search(alice, f"q{i}") for i in range(2)]

    assert bobs == ["allow", "allow", "reject"]
    assert alices == ["allow", "allow"]  # her own budget, not the rest of bob's


async def test_another_principals_mcp_session_id_is_refused_even_for_delete(start_gateway, gateway_config, keys,
                                                                           connect_mcp):
    gateway = await start_gateway(gateway_config, {"sessions.yaml": POLICY})
    async with connect_mcp(gateway, "bob") as bob:
        await bob.call("api_search", {"q": "before"})
        stolen = bob.session_id
        assert stolen
        async with httpx2.AsyncClient(base_url=gateway.url, headers={
                **MCP_HEADERS, "Authorization": f"Bearer {keys['alice']}", "Mcp-Session-Id": stolen}) as alice:
            call = await alice.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                  "params": {"name": "api_search", "arguments": {"q": "stop"}}})
            listing = await alice.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
            delete = await alice.delete("/mcp")
        after = await bob.call("api_search", {"q": "after"})

    assert [call.status_code, listing.status_code, delete.status_code] == [404, 404, 404]
    assert message_of(call)["error"]["message"] == "Session not found"
    assert after.is_error is False  # bob's session is alive and not terminated
    assert not [e for e in gateway.audit_events() if e["principal"]["id"] == "alice"]  # alice's call never ran


async def test_one_key_cannot_open_mcp_sessions_without_end(start_gateway, configs, http_api, keys, connect_mcp):
    config = configs.base(configs.http_upstream("api", http_api.url), limits={"max_sessions_per_principal": 3})
    gateway = await start_gateway(config, {"sessions.yaml": POLICY})
    async with contextlib.AsyncExitStack() as stack:
        opened = [await stack.enter_async_context(RawMcp.open(gateway.url, keys["alice"])) for _ in range(3)]
        async with httpx2.AsyncClient(base_url=gateway.url, headers={
                **MCP_HEADERS, "Authorization": f"Bearer {keys['alice']}"}) as alice:
            refused = await alice.post("/mcp", json=INITIALIZE)
            async with connect_mcp(gateway, "bob") as bob:  # everyone else still gets a session
                other = await bob.call("api_search", {"q": "bob works"})
            await alice.delete("/mcp", headers={"Mcp-Session-Id": opened[0].session_id})
            again = await alice.post("/mcp", json=INITIALIZE)
            await alice.delete("/mcp", headers={"Mcp-Session-Id": again.headers.get("mcp-session-id", "")})

    assert refused.status_code == 429
    assert "3 MCP sessions open" in message_of(refused)["error"]["message"]
    assert "mcp-session-id" not in refused.headers
    assert other.is_error is False
    assert again.status_code == 200  # closing one makes room


async def test_a_burst_of_new_sessions_cannot_overshoot_the_cap(start_gateway, configs, http_api, keys):
    config = configs.base(configs.http_upstream("api", http_api.url), limits={"max_sessions_per_principal": 3})
    gateway = await start_gateway(config, {"sessions.yaml": POLICY})
    async with httpx2.AsyncClient(base_url=gateway.url, headers={
            **MCP_HEADERS, "Authorization": f"Bearer {keys['bob']}"}, timeout=httpx2.Timeout(30)) as bob:
        responses = await asyncio.gather(*(bob.post("/mcp", json=INITIALIZE) for _ in range(12)))
        opened = [r.headers["mcp-session-id"] for r in responses if r.status_code == 200]
        for session_id in opened:
            await bob.delete("/mcp", headers={"Mcp-Session-Id": session_id})

    assert 1 <= len(opened) <= 3
    assert {r.status_code for r in responses} <= {200, 429, 503}  # 503: the SDK's answer to a lost race


async def test_sessions_of_a_database_from_before_stay_terminated(tmp_path, start_gateway, gateway_config, keys):
    root = tmp_path / "upgraded"
    (root / "data").mkdir(parents=True)
    with contextlib.closing(sqlite3.connect(root / "data" / "gateway.sqlite3")) as db:  # the old schema
        db.executescript("""
            CREATE TABLE sessions (id TEXT PRIMARY KEY, started_at TEXT NOT NULL, calls INTEGER NOT NULL DEFAULT 0,
                calls_by_tool TEXT NOT NULL DEFAULT '{}', rejected INTEGER NOT NULL DEFAULT 0,
                terminated INTEGER NOT NULL DEFAULT 0, terminate_message TEXT);
            INSERT INTO sessions VALUES ('legacy', '2026-01-01T00:00:00.000Z', 1, '{"api_search": 1}', 0, 1,
                                         'Ended before the upgrade.');
        """)
        db.commit()
    gateway = await start_gateway(gateway_config, {"sessions.yaml": POLICY}, root=root)
    async with _client(gateway, keys, "bob", "legacy") as bob, _client(gateway, keys, "alice", "fresh") as alice:
        response = await bob.post("/v1/tools/api_search/invoke", json={"arguments": {"q": "hello"}})
        fresh = await _search(alice, "hello")

    assert (response.json()["decision"], response.json()["content"][0]["text"]) == \
        ("terminated", "Ended before the upgrade.")
    assert fresh == "allow"
    await gateway.gateway.store.flushed()  # rows are written behind (gathered for STORE_WRITE_COALESCE_SECONDS)
    with contextlib.closing(sqlite3.connect(root / "data" / "gateway.sqlite3")) as db:
        rows = db.execute("SELECT principal, id, terminated FROM sessions ORDER BY principal, id").fetchall()
    assert rows == [("", "legacy", 1), ("alice", "fresh", 0), ("bob", "legacy", 1)]
