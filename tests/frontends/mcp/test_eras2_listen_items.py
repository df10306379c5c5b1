"""Resource and prompt list changes for 2026-07-28 clients on ``subscriptions/listen`` streams: a stream that
asked for them is told when the resources or prompts *its principal* sees changed (an upstream's change, or a
policy reload), and not otherwise.

Real parts: the gateway under uvicorn, the stdio test server as upstream (``register_note`` adds a resource and
says so), SDK clients at 2026-07-28.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.client.subscriptions import PromptsListChanged, ResourcesListChanged, Subscription

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODERN = "2026-07-28"
OPEN = "policy: p\nrules: []\n"
EXTRA = "gateway://up/notes://extra"
# Only alice sees the resource register_note adds.
EXTRA_FOR_ALICE = f"""
policy: p
rules:
  - id: extra-for-alice
    resources: ["{EXTRA}"]
    when: principal.id != "alice"
    action: reject
"""
# Nobody sees the prompt up_confidential.
HIDE_CONFIDENTIAL = """
policy: p
rules:
  - id: no-confidential
    prompts: [up_confidential]
    action: reject
"""


async def _next_event(subscription: Subscription, timeout: float = 10.0) -> Any:
    return await asyncio.wait_for(subscription.__anext__(), timeout)


async def _no_event(subscription: Subscription, wait: float = 1.0) -> None:
    with contextlib.suppress(TimeoutError):
        event = await asyncio.wait_for(subscription.__anext__(), wait)
        pytest.fail(f"unexpected event {event!r}")


@contextlib.asynccontextmanager
async def _listening(connect_mcp: Any, gateway: Any, who: str) -> AsyncIterator[tuple[Any, Subscription]]:
    async with connect_mcp(gateway, who, mode=MODERN) as conn, \
            conn.client.listen(resources_list_changed=True, prompts_list_changed=True) as sub:
        assert sub.honored.resources_list_changed is True
        assert sub.honored.prompts_list_changed is True
        assert not sub.honored.tools_list_changed  # not asked for, not acknowledged
        yield conn, sub


async def _resource_uris(conn: Any) -> set[str]:
    return {str(r.uri) for r in (await conn.client.list_resources(cache_mode="refresh")).resources}


async def test_a_listener_is_told_when_an_upstream_adds_a_resource(start_gateway, configs, connect_mcp):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with _listening(connect_mcp, gateway, "alice") as (conn, sub):
        assert EXTRA not in await _resource_uris(conn)

        await conn.call("up_register_note")

        assert await _next_event(sub) == ResourcesListChanged()
        assert EXTRA in await _resource_uris(conn)
        await _no_event(sub, 0.5)  # the prompts did not change: no prompts event


async def test_bob_is_not_told_of_a_resource_only_alice_sees(start_gateway, configs, connect_mcp):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": EXTRA_FOR_ALICE})
    async with _listening(connect_mcp, gateway, "alice") as (alice, alice_sub), \
            _listening(connect_mcp, gateway, "bob") as (bob, bob_sub):
        await alice.call("up_register_note")

        assert await _next_event(alice_sub) == ResourcesListChanged()
        await _no_event(bob_sub)
        assert EXTRA not in await _resource_uris(bob)


async def test_a_reload_that_hides_a_prompt_tells_the_listener(start_gateway, configs, connect_mcp):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": OPEN})
    async with _listening(connect_mcp, gateway, "alice") as (conn, sub):
        prompts = {p.name for p in (await conn.client.list_prompts()).prompts}
        assert "up_confidential" in prompts

        (gateway.root / "policies" / "p.yaml").write_text(HIDE_CONFIDENTIAL, encoding="utf-8")

        assert await _next_event(sub) == PromptsListChanged()
        prompts = {p.name for p in (await conn.client.list_prompts(cache_mode="refresh")).prompts}
        assert "up_confidential" not in prompts
        await _no_event(sub, 0.5)  # the resources did not change for alice
