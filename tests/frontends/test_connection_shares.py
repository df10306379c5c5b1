"""Shares of connections and held calls (issue 18 item 4, gateway/frontends/http/shares.py), on loopback.

Two keys, each within its own limits, could fill every connection of the gateway, and then every other
key got 503. Here keys exhaust their shares with the three things that hold a connection (calls held
for approval, ``GET /mcp`` streams, bodies that never finish), an unauthenticated flood sends bodies
that never finish, and: another key's calls still run, the approver still approves, and each refusal is
a 429 or 503 with Retry-After that names the share, counted in /metrics. Caps are small, set in config.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from raw_mcp import INITIALIZE, MCP_HEADERS, RawMcp, message_of

from gateway.auth.keys import hash_key
from gateway.observe.metrics import families

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

AGENTS = ("agent-a", "agent-b", "agent-c", "agent-d", "agent-e", "dana")
KEYS = {name: f"{name}-key-{n}31" for n, name in enumerate((*AGENTS, "carol", "root"))}
HELD_SHARE = 2

POLICY = """
policy: shares
rules:
  - id: deletes-need-carol
    tools: [api_delete_item]
    action: approve
    message: Deletes need carol.
    approval: {approvers: [carol], timeout: 600s, hold: 60s}
"""


def _config(configs: Any, api_url: str, max_connections: int, per_principal: int, reserved: int) -> dict[str, Any]:
    keys = [{"principal": {"id": name}, "sha256": hash_key(KEYS[name])} for name in AGENTS]
    keys += [{"principal": {"id": "carol"}, "sha256": hash_key(KEYS["carol"]), "approver": True},
             {"principal": {"id": "root"}, "sha256": hash_key(KEYS["root"]), "admin": True}]
    return configs.base(
        configs.http_upstream("api", api_url),
        auth={"api_keys": keys}, metrics={"enabled": True},
        limits={"call_timeout": 10, "per_principal": {"max_held_calls": HELD_SHARE}},
        http={"max_connections": max_connections, "max_connections_per_principal": per_principal,
              "reserved_connections": reserved, "body_timeout": 300})


@pytest.fixture
def shares_config(configs: Any, http_api: Any) -> Any:
    """``shares_config(max_connections, per_principal, reserved)``: gateway.yaml for these tests."""
    return lambda *caps: _config(configs, http_api.url, *caps)


def client(gateway: Any, who: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {KEYS[who]}"},
                              timeout=httpx2.Timeout(30, read=300), limits=httpx2.Limits(max_connections=50))


async def held_delete(http: httpx2.AsyncClient, item: str) -> httpx2.Response:
    """A call that needs carol, held on its connection for up to 5 minutes (REST ``?wait=``)."""
    return await http.post("/v1/tools/api_delete_item/invoke", params={"wait": "300s"},
                           json={"arguments": {"item_id": item}, "call_id": f"c-{item}"})


async def open_stream(stack: contextlib.AsyncExitStack, http: httpx2.AsyncClient) -> int:
    """A new MCP session and its ``GET /mcp`` stream, left open until ``stack`` closes: the stream's status."""
    init = await http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    if init.status_code != 200:
        return init.status_code
    session = init.headers["mcp-session-id"]
    await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers={**MCP_HEADERS, "Mcp-Session-Id": session})
    request = http.build_request("GET", "/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": session})
    response = await http.send(request, stream=True)
    stack.push_async_callback(response.aclose)
    return response.status_code


async def slow_body(gateway: Any, who: str | None, stack: contextlib.AsyncExitStack) -> asyncio.StreamReader:
    """A raw connection that sends a POST's headers and 10 of its 1,000 body bytes, then nothing more."""
    port = httpx2.URL(gateway.url).port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    stack.callback(writer.close)
    auth = f"Authorization: Bearer {KEYS[who]}\r\n" if who else ""
    writer.write((f"POST /v1/tools/api_search/invoke HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"argument").encode())
    await writer.drain()
    return reader


async def status_of(reader: asyncio.StreamReader, timeout: float | None = 10) -> int:
    """The status of the answer on a raw connection (read until the server closes it)."""
    data = b""
    async with asyncio.timeout(timeout):
        while chunk := await reader.read(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


async def pending_count(gateway: Any) -> int:
    async with client(gateway, "carol") as carol:
        return int((await carol.get("/v1/approvals", params={"state": "pending", "limit": 1})).json()["total"])


async def scrape(gateway: Any) -> dict[str, float]:
    async with client(gateway, "root") as root:
        text = (await root.get("/metrics")).content
    return {labels["share"]: value for name, labels, value in families(text) if name == "gateway_share_refusals_total"}


@contextlib.asynccontextmanager
async def clients(gateway: Any, *who: str) -> AsyncIterator[dict[str, httpx2.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield {name: await stack.enter_async_context(client(gateway, name)) for name in who}


async def test_keys_that_exhaust_their_shares_never_stop_another_keys_call_or_an_approval(
        start_gateway, shares_config, until):
    # 40 connections, 4 reserved for carol and root; 4 requests at once per key, 2 of them held calls.
    gateway = await start_gateway(shares_config(40, 4, 4), {"p.yaml": POLICY})
    tag = uuid.uuid4().hex[:8]
    async with clients(gateway, "agent-a", "agent-b", "agent-c", "dana", "carol") as c, \
            contextlib.AsyncExitStack() as open_:
        # agent-a: three held calls (the third is over the held share: answered "pending" at once) ...
        held = [asyncio.create_task(held_delete(c["agent-a"], f"{tag}-{i}")) for i in range(HELD_SHARE)]
        await until(lambda: _at_least(pending_count(gateway), HELD_SHARE))
        third = await held_delete(c["agent-a"], f"{tag}-third")
        async with RawMcp.open(gateway.url, KEYS["agent-a"]) as mcp:  # MCP too (held 60 s, its client waits 30)
            over_mcp = message_of(await mcp.call_tool("api_delete_item", f'{{"item_id": "{tag}-mcp"}}', f"c-{tag}-mcp"))
        # ... then GET /mcp streams until its share is full
        a_streams = [await open_stream(open_, c["agent-a"]) for _ in range(4)]
        # agent-b: streams only, more than its share
        b_streams = [await open_stream(open_, c["agent-b"]) for _ in range(6)]
        # agent-c: bodies that never finish, more than its share
        c_bodies = [asyncio.create_task(status_of(await slow_body(gateway, "agent-c", open_), timeout=None))
                    for _ in range(6)]
        await until(lambda: _done(c_bodies, 2))  # the two past its share answered; the other four wait
        c_refused = [t.result() for t in c_bodies if t.done()]
        # no key at all: bodies that never finish, far more than any share
        flood = [await slow_body(gateway, None, open_) for _ in range(60)]
        flood_statuses = await asyncio.gather(*(status_of(r) for r in flood))

        over = await c["agent-a"].get("/v1/tools")
        dana_call = await c["dana"].post("/v1/tools/api_search/invoke", json={"arguments": {"q": tag}})
        listing = (await c["carol"].get("/v1/approvals", params={"state": "pending"})).json()
        [request] = [a for a in listing["approvals"] if a["call_id"] == f"c-{tag}-0"]
        vote = await c["carol"].post(f"/v1/approvals/{request['id']}/decision", json={"approve": True})
        approved = await asyncio.wait_for(held[0], 30)
        counted = await scrape(gateway)
        for task in [*held[1:], *c_bodies]:
            task.cancel()
        await asyncio.gather(*held[1:], *c_bodies, return_exceptions=True)

    assert (third.status_code, third.json()["decision"]) == (202, "pending")  # not held: answered at once
    assert over_mcp["result"]["_meta"]["gateway/decision"] == "pending"
    assert a_streams == [200, 200, 429, 429]
    assert b_streams == [200] * 4 + [429] * 2
    assert c_refused == [429, 429]
    assert flood_statuses == [401] * 60  # refused before their bodies: no connection waits on them
    assert over.status_code == 429
    assert over.headers["retry-after"] == "1"
    assert over.json()["error"]["code"] == "connection-share"
    assert "already has 4 requests open at once" in over.json()["error"]["message"]
    assert (dana_call.status_code, dana_call.json()["decision"]) == (200, "allow")
    assert vote.status_code == 200
    assert (approved.status_code, approved.json()["decision"]) == (200, "approve")
    assert counted.get("principal", 0) >= 2 + 2 + 2 + 1
    assert counted.get("held", 0) >= 2


async def test_the_approver_decides_while_agent_keys_fill_every_connection_they_may_use(start_gateway, shares_config):
    # 10 connections, 2 reserved: the other 8 shared by agents, no key holding more than it leaves free x 2.
    gateway = await start_gateway(shares_config(10, 8, 2), {"p.yaml": POLICY})
    tag = uuid.uuid4().hex[:8]
    agents = ("agent-a", "agent-b", "agent-c", "agent-d", "agent-e")
    async with clients(gateway, *agents, "dana", "carol", "root") as c, contextlib.AsyncExitStack() as open_:
        asked = await c["agent-a"].post("/v1/tools/api_delete_item/invoke",
                                        json={"arguments": {"item_id": tag}, "call_id": f"c-{tag}"})
        opened = {}
        for name in agents:  # each opens streams until it is refused
            statuses = []
            while not statuses or statuses[-1] == 200:
                statuses.append(await open_stream(open_, c[name]))
            opened[name] = statuses.count(200)
        dana = await c["dana"].get("/v1/tools")
        listing = await c["carol"].get("/v1/approvals", params={"state": "pending"})
        vote = await c["carol"].post(f"/v1/approvals/{asked.json()['approval_id']}/decision", json={"approve": True})
        sessions = await c["root"].get("/v1/admin/sessions")

    assert asked.status_code == 202
    assert opened == {"agent-a": 3, "agent-b": 2, "agent-c": 1, "agent-d": 1, "agent-e": 1}  # 8: all they may use
    assert dana.status_code == 503
    assert dana.headers["retry-after"] == "1"
    assert dana.json()["error"]["code"] == "connection-pool-busy"
    assert listing.status_code == 200 and listing.json()["total"] >= 1
    assert vote.status_code == 200
    assert sessions.status_code == 200


async def _at_least(count: Any, wanted: int) -> bool:
    return bool(await count >= wanted)


async def _done(tasks: list[asyncio.Task[Any]], count: int) -> bool:
    return sum(t.done() for t in tasks) >= count


async def test_streams_and_slow_bodies_their_clients_close_give_their_slots_back(start_gateway, shares_config, until):
    gateway = await start_gateway(shares_config(40, 2, 4), {"p.yaml": POLICY})
    shares = _shares(gateway)
    async with clients(gateway, "agent-a") as c:
        for _ in range(3):  # each round fills the share, then the clients go away
            async with contextlib.AsyncExitStack() as open_:
                assert [await open_stream(open_, c["agent-a"]) for _ in range(2)] == [200, 200]
                assert (await c["agent-a"].get("/v1/tools")).status_code == 429
            await until(lambda: _holds(shares, "agent-a", 0))
            async with contextlib.AsyncExitStack() as open_:
                for _ in range(2):
                    await slow_body(gateway, "agent-a", open_)
                await until(lambda: _holds(shares, "agent-a", 2))
            await until(lambda: _holds(shares, "agent-a", 0))
        assert (await c["agent-a"].get("/v1/tools")).status_code == 200


def _shares(gateway: Any) -> Any:
    """The running gateway's Shares (the middleware's own object, found on the built middleware stack)."""
    app = gateway.app.middleware_stack
    while not hasattr(app, "shares"):
        app = app.app
    return app.shares


async def _holds(shares: Any, key: str, count: int) -> bool:
    return bool(shares.holding(key) == count)
