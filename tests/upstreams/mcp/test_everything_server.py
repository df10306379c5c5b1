"""The gateway in front of a third-party MCP server: @modelcontextprotocol/server-everything over stdio.

Each test here drives the gateway with the SDK's client, in both protocol eras, and compares with what
the same server gives a direct connection where that is the promise.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import INVALID_REQUEST, ErrorData
from thirdparty import server_everything

pytestmark = [pytest.mark.parametrize("mode", ["legacy", "2026-07-28"]), pytest.mark.session_loop]

ALLOW_ALL = """
    policy: everything
    rules:
      - id: no-unlucky-sums
        tools: [ev_get-sum]
        when: args.a == 13
        action: reject
        message: not that number
"""


async def _unused(*args: Any) -> Any:
    return ErrorData(code=INVALID_REQUEST, message="not answered by this client")  # e.g. the roots asked at startup


async def direct_tools() -> dict[str, Any]:
    """The server's tools as a direct client sees them (it speaks the handshake era only), declaring what the
    gateway declares to its upstreams (sampling, elicitation, roots), on which some of the server's tools depend."""
    node, *args = server_everything()
    async with Client(StdioServerParameters(command=node, args=args), mode="legacy", sampling_callback=_unused,
                      elicitation_callback=_unused, list_roots_callback=_unused) as client:
        return {t.name: t for t in (await client.list_tools()).tools}


async def test_every_tool_is_listed_with_every_field(mode: str, start_gateway: Any, configs: Any,
                                                     connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev")), {"all.yaml": ALLOW_ALL})
    direct = await direct_tools()
    async with connect_mcp(gateway, mode=mode) as conn:
        listed = {t.name: t for t in (await conn.client.list_tools()).tools}
    assert set(listed) == {f"ev_{name}" for name in direct}
    for name, tool in direct.items():
        through = listed[f"ev_{name}"]
        assert through.input_schema == tool.input_schema
        assert through.output_schema == tool.output_schema
        if mode == "legacy":  # at 2026-07-28 task support is the tasks extension's, not a Tool field
            # a task-only tool is "optional" through the gateway, which runs the upstream task itself (test_tasks.py)
            expected = tool.execution
            if expected is not None and expected.task_support == "required":
                expected = expected.model_copy(update={"task_support": "optional"})
            assert through.execution == expected
        assert through.annotations == tool.annotations


async def test_a_tool_call_returns_what_the_server_returns(mode: str, start_gateway: Any, configs: Any,
                                                           connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev")), {"all.yaml": ALLOW_ALL})
    async with connect_mcp(gateway, mode=mode) as conn:
        result = await conn.client.call_tool("ev_get-sum", {"a": 2, "b": 40})
    assert not result.is_error
    assert "42" in result.content[0].text  # type: ignore[union-attr]


async def test_a_policy_applies_to_the_servers_tool(mode: str, start_gateway: Any, configs: Any,
                                                   connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev")), {"all.yaml": ALLOW_ALL})
    async with connect_mcp(gateway, mode=mode) as conn:
        result = await conn.client.call_tool("ev_get-sum", {"a": 13, "b": 1})
    assert result.is_error
    assert "not that number" in result.content[0].text  # type: ignore[union-attr]
