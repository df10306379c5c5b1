"""MCP tasks through the gateway (docs/gateway.md "Tasks"): task-only tools, gateway tasks, principal binding."""

from __future__ import annotations

from typing import Any

import pytest

ALLOW = """
    policy: tasks
    rules:
      - id: no-forbidden-topics
        tools: [ev_simulate-research-query]
        when: args.topic == "forbidden"
        action: reject
        message: not that topic
"""


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_task_only_tool_works_for_a_client_that_knows_nothing_of_tasks(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev")), {"p.yaml": ALLOW})
    async with connect_mcp(gateway, mode=mode) as conn:
        result = await conn.client.call_tool("ev_simulate-research-query", {"topic": "tides"})
    assert not result.is_error, result
    assert "Research Report: tides" in result.content[0].text  # type: ignore[union-attr]
