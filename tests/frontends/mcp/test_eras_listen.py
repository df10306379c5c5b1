"""Tool-list change notifications in both protocol eras: handshake-era sessions are told on their
session; 2026-07-28 clients through ``subscriptions/listen``, bound to their principal and capped.

Real parts: the gateway under uvicorn, the stdio test server as upstream, SDK clients in both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from mcp import MCPError
from mcp.client.subscriptions import Subscription, ToolsListChanged

from gateway.core.limits import MAX_LISTEN_STREAMS_PER_PRINCIPAL

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

OPEN = "policy: p\nrules: []\n"
# Only admins see up_secret; bob (staff only) does not.
SECRET_FOR_ADMINS = """
policy: p
rules:
  - id: secret-for-admins
    tools: [up_secret]
    when: '!("admins" in principal.groups)'
    action: reject
    message: Only admins.
"""
# Nobody sees up_pid.
HIDE_PID = """
policy: p
rules:
  - id: no-pid
    tools: [up_pid]
    action: reject
    message: No.
"""

MODERN = "2026-07-28"


async def _next_event(subscription: Subscription, timeout: float = 10.0) -> Any:
    return await asyncio.wait_for(subscription.__anext__(), timeout)


async def _no_event(subscription: Subscription, wait: float = 1.0) -> None:
    with contextlib.suppress(TimeoutError):
        event = await asyncio.wait_for(subscription.__anext__(), wait)
        pytest.fail(f"unexpected event {event!r}")


@contextlib.asynccontextmanager
async def _listening(connect_mcp: Any, gateway: Any, who: str) -> AsyncIterator[tuple[Any, Subscription]]:
    async with connect_mcp(gateway, who, mode=MODERN) as conn, conn.client.listen(tools_list_changed=True) as sub:
        assert sub.honored.tools_list_changed is True
        yield conn, sub


async def test_a_listener_is_told_when_an_upstream_adds_a_tool(start_gateway, configs, connect_mcp):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with _listening(connect_mcp, gateway, "alice") as (conn, sub):
        assert "up_extra" not in await conn.tool_names()

        await conn.call("up_register_extra")

        assert await _next_event(sub) == ToolsListChanged()
        assert "up_extra" in await conn.tool_names()


async def test_a_policy_reload_that_hides_a_tool_tells_listeners_and_handshake_sessions(
        start_gateway, configs, connect_mcp, until):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with _listening(connect_mcp, gateway, "alice") as (conn, sub), \
            connect_mcp(gateway, "alice", mode="legacy") as legacy:
        assert "up_pid" in await conn.tool_names()
        assert "up_pid" in await legacy.tool_names()  # the gateway knows a handshake session once it asked

        (gateway.root / "policies" / "p.yaml").write_text(HIDE_PID, encoding="utf-8")

        assert await _next_event(sub) == ToolsListChanged()
        assert "up_pid" not in await conn.tool_names()

        async def legacy_told() -> bool:
            return any(isinstance(m, types.ToolListChangedNotification) for m in legacy.notifications)

        await until(legacy_told)
        assert "up_pid" not in await legacy.tool_names()


async def test_bob_is_not_told_of_a_change_only_alice_sees(start_gateway, configs, connect_mcp):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with _listening(connect_mcp, gateway, "alice") as (alice, alice_sub), \
            _listening(connect_mcp, gateway, "bob") as (bob, bob_sub):
        assert "up_secret" in await bob.tool_names()

        # the reload hides up_secret from bob only: bob is told, alice is not
        (gateway.root / "policies" / "p.yaml").write_text(SECRET_FOR_ADMINS, encoding="utf-8")
        assert await _next_event(bob_sub) == ToolsListChanged()
        assert "up_secret" not in await bob.tool_names()
        await _no_event(alice_sub)
        assert "up_secret" in await alice.tool_names()

        # back to open: up_secret reappears for bob only
        (gateway.root / "policies" / "p.yaml").write_text(OPEN, encoding="utf-8")
        assert await _next_event(bob_sub) == ToolsListChanged()
        await _no_event(alice_sub)


async def test_a_reload_that_changes_no_list_tells_no_listener(start_gateway, configs, connect_mcp, until):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with _listening(connect_mcp, gateway, "alice") as (_, sub):
        revision = gateway.gateway.policies.current.revision
        (gateway.root / "policies" / "p.yaml").write_text(OPEN + "# a comment\n", encoding="utf-8")

        async def reloaded() -> bool:
            return gateway.gateway.policies.current.revision != revision

        await until(reloaded)
        await _no_event(sub, wait=0.5)


async def test_listen_streams_are_capped_per_principal(shared_gateway, connect_mcp):
    async with contextlib.AsyncExitStack() as stack:
        conn = await stack.enter_async_context(connect_mcp(shared_gateway, "alice", mode=MODERN))
        for _ in range(MAX_LISTEN_STREAMS_PER_PRINCIPAL):
            await stack.enter_async_context(conn.client.listen(tools_list_changed=True))

        with pytest.raises(MCPError) as refused:
            async with conn.client.listen(tools_list_changed=True):
                pass
        assert f"already has {MAX_LISTEN_STREAMS_PER_PRINCIPAL} listen streams open" in str(refused.value)

        # another principal is not affected
        async with _listening(connect_mcp, shared_gateway, "bob"):
            pass

    # closed streams free their places
    async with _listening(connect_mcp, shared_gateway, "alice"):
        pass


async def test_list_changes_are_acknowledged_and_resource_subscriptions_are_not(shared_gateway, connect_mcp):
    # resources and prompts: test_eras2_listen_items.py
    async with connect_mcp(shared_gateway, "alice", mode=MODERN) as conn, conn.client.listen(
            tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True,
            resource_subscriptions=["file:///x"]) as sub:
        assert sub.honored.tools_list_changed is True
        assert (sub.honored.prompts_list_changed, sub.honored.resources_list_changed,
                sub.honored.resource_subscriptions) == (True, True, None)


async def test_a_handshake_session_is_told_only_of_changes_to_its_own_list(start_gateway, configs, connect_mcp, until):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with connect_mcp(gateway, "alice", mode="legacy") as alice, connect_mcp(gateway, "bob", mode="legacy") as bob:
        assert "up_secret" in await alice.tool_names() and "up_secret" in await bob.tool_names()

        def told(conn: Any) -> int:
            return sum(isinstance(m, types.ToolListChangedNotification) for m in conn.notifications)

        (gateway.root / "policies" / "p.yaml").write_text(SECRET_FOR_ADMINS, encoding="utf-8")

        async def bob_told() -> bool:
            return told(bob) == 1

        await until(bob_told)
        assert "up_secret" not in await bob.tool_names()
        await asyncio.sleep(0.5)
        assert told(alice) == 0

        # an upstream change alice can see tells both
        await alice.call("up_register_extra")

        async def both_told() -> bool:
            return told(alice) == 1 and told(bob) == 2

        await until(both_told)
