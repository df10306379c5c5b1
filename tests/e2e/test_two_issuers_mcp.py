"""Two issuers' ``sub: alice`` over MCP: one alice cannot read or cancel the other's task, answer the other's
round trip, or be told of the other's tool-list changes, and the other's listen streams do not count against her.

Issuer A is the real OpenID Provider (``idp``), issuer B a loopback JWKS of our own (tests/two_issuers_support.py).
The gateway is served from its config with both, over real HTTP, with the stdio test server and server-everything
as upstreams, and the SDK's MCP client calls it with each alice's token.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from mcp import MCPError
from mcp.client.subscriptions import Subscription, ToolsListChanged
from tasks_support import NOT_FOUND, raw, refused
from two_issuers_support import alices, bearer, two_issuers_auth

from gateway.core.limits import MAX_LISTEN_STREAMS_PER_PRINCIPAL

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODERN = "2026-07-28"
TASK_TOOL = "ev_simulate-research-query"
OPEN = "policy: p\nrules: []\n"
# Issuer B's people do not see up_secret.
SECRET_FOR_ISSUER_A = """
policy: p
rules:
  - id: secret-for-issuer-a
    tools: [up_secret]
    when: principal.kind == "jwt" && principal.issuer == env.issuer_b
    action: reject
    message: Only issuer A's people.
"""


@pytest_asyncio.fixture(loop_scope="session")
async def two_alices(idp, second_issuer, start_gateway, configs):
    """(gateway, alice's Authorization header from issuer A, alice's from issuer B)."""
    config = configs.base(configs.mcp_upstream("up"), configs.everything_upstream("ev"),
                          auth=two_issuers_auth(idp, second_issuer, configs.api_keys("alice")),
                          env={"stage": "test", "issuer_b": second_issuer.issuer})
    gateway = await start_gateway(config, {"p.yaml": OPEN})
    token_a, token_b = await alices(idp, second_issuer)
    return gateway, bearer(token_a), bearer(token_b)


async def test_one_issuers_alice_cannot_read_cancel_or_list_the_others_task(two_alices, connect_mcp):
    gateway, alice_a, alice_b = two_alices
    async with connect_mcp(gateway, None, headers=alice_a) as a:
        created = await raw(a.client.session, "tools/call",
                            {"name": TASK_TOOL, "arguments": {"topic": "a's secrets"}, "task": {}})
        task_id = created["task"]["taskId"]
        async with connect_mcp(gateway, None, headers=alice_b) as b:
            for method in ("tasks/get", "tasks/cancel", "tasks/result"):
                stolen = await refused(b.client.session, method, {"taskId": task_id})
                assert (stolen.code, str(stolen)) == (types.INVALID_PARAMS, NOT_FOUND), method
            assert (await raw(b.client.session, "tasks/list", {}))["tasks"] == []
        assert [t["taskId"] for t in (await raw(a.client.session, "tasks/list", {}))["tasks"]] == [task_id]
        result = await raw(a.client.session, "tasks/result", {"taskId": task_id})  # B's cancel changed nothing
    assert "Research Report: a's secrets" in result["content"][0]["text"]


async def test_one_issuers_alice_cannot_answer_the_others_round_trip(two_alices, connect_mcp):
    gateway, alice_a, alice_b = two_alices
    async with connect_mcp(gateway, None, headers=alice_a, mode=MODERN, sampling_callback=_never) as a, \
            connect_mcp(gateway, None, headers=alice_b, mode=MODERN, sampling_callback=_never) as b:
        args = {"prompt": "issuer A's alice's secret"}
        first = await a.client.session.call_tool("up_ask_model", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        [key] = list(first.input_requests or {})

        def answer(text: str) -> dict[str, Any]:
            return {key: types.CreateMessageResult(role="assistant", model="m",
                                                   content=types.TextContent(type="text", text=text))}

        with pytest.raises(MCPError) as taken:  # the same call, the same state, the other alice: refused
            await b.client.session.call_tool("up_ask_model", args, input_responses=answer("B's answer"),
                                             request_state=first.request_state)
        assert (taken.value.code, taken.value.error.message) == (types.INVALID_PARAMS,
                                                                 "Invalid or expired requestState")
        final = await a.client.session.call_tool("up_ask_model", args, input_responses=answer("A's answer"),
                                                 request_state=first.request_state)
    assert final.content[0].text == "model said: A's answer"  # type: ignore[union-attr]


async def _never(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    raise AssertionError("the round trips here are driven by hand")


async def test_one_issuers_alice_is_not_told_of_the_others_tool_list_changes(two_alices, connect_mcp):
    gateway, alice_a, alice_b = two_alices
    async with connect_mcp(gateway, None, headers=alice_a, mode=MODERN) as a, \
            connect_mcp(gateway, None, headers=alice_b, mode=MODERN) as b, \
            a.client.listen(tools_list_changed=True) as a_sub, b.client.listen(tools_list_changed=True) as b_sub:
        (gateway.root / "policies" / "p.yaml").write_text(SECRET_FOR_ISSUER_A, encoding="utf-8")
        assert await asyncio.wait_for(b_sub.__anext__(), 10) == ToolsListChanged()
        assert "up_secret" not in {t.name for t in (await b.client.list_tools()).tools}
        await _no_event(a_sub)
        assert "up_secret" in {t.name for t in (await a.client.list_tools()).tools}


async def _no_event(subscription: Subscription, wait: float = 1.0) -> None:
    with contextlib.suppress(TimeoutError):
        event = await asyncio.wait_for(subscription.__anext__(), wait)
        pytest.fail(f"unexpected event {event!r}")


async def test_one_issuers_alices_listen_streams_leave_the_others_share_alone(two_alices, connect_mcp):
    gateway, alice_a, alice_b = two_alices
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(connect_mcp(gateway, None, headers=alice_a, mode=MODERN))
        for _ in range(MAX_LISTEN_STREAMS_PER_PRINCIPAL):
            await stack.enter_async_context(a.client.listen(tools_list_changed=True))
        with pytest.raises(MCPError) as full:
            async with a.client.listen(tools_list_changed=True):
                pass
        assert f"already has {MAX_LISTEN_STREAMS_PER_PRINCIPAL} listen streams open" in str(full.value)
        async with connect_mcp(gateway, None, headers=alice_b, mode=MODERN) as b, \
                b.client.listen(tools_list_changed=True) as b_sub:
            assert b_sub.honored.tools_list_changed is True
