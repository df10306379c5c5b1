"""Progress from a third-party server (server-everything over stdio) reaches the gateway's clients as it reaches a
direct client: ``trigger-long-running-operation`` sends one notification per step, in both client eras."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from test_everything_server import ALLOW_ALL, _unused
from thirdparty import server_everything

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

STEPS = {"duration": 1, "steps": 3}


def _recorder(seen: list[tuple[float, float | None]]) -> Any:
    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total))

    return progress


async def _direct() -> list[tuple[float, float | None]]:
    node, *args = server_everything()
    seen: list[tuple[float, float | None]] = []
    async with Client(StdioServerParameters(command=node, args=args), mode="legacy", sampling_callback=_unused,
                      elicitation_callback=_unused, list_roots_callback=_unused) as client:
        result = await client.call_tool("trigger-long-running-operation", STEPS, progress_callback=_recorder(seen))
    assert not result.is_error
    return seen


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_long_running_operation_sends_the_same_progress_through_the_gateway(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    direct = await _direct()
    assert len(direct) == STEPS["steps"]  # the server's own behaviour, so the comparison below means something
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev")), {"all.yaml": ALLOW_ALL})
    seen: list[tuple[float, float | None]] = []
    async with connect_mcp(gateway, mode=mode) as conn:
        result = await conn.client.call_tool("ev_trigger-long-running-operation", STEPS,
                                             progress_callback=_recorder(seen))
    assert not result.is_error
    assert seen == direct
