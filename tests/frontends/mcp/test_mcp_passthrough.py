"""What an upstream MCP tool sends reaches the client through the gateway: every field of its definition,
results that validate against its outputSchema, and its progress notifications, in both protocol eras."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
import pytest_asyncio
from gateway_harness import KEYS, UPSTREAM_SERVER, RunningGateway, base_config, mcp_upstream, run_gateway, write_gateway
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

POLICY = """
policy: passthrough
rules:
  - id: weather-dry-run
    tools: [up_weather]
    when: args.city == "nowhere"
    action: skip
    result: {note: dry run}
  - id: weather-fitting-dry-run
    tools: [up_weather]
    when: args.city == "testville"
    action: skip
    result: {city: testville, celsius: 0}
  - id: weather-refused
    tools: [up_weather]
    when: args.city == "forbidden"
    action: reject
    message: Not that city.
  - id: weather-held
    tools: [up_weather]
    when: args.city == "held"
    action: approve
    message: Weather for this city needs ops.
    approval: {approvers: ["group:ops"], timeout: 30s, hold: 1s}
"""

ERAS = ["legacy", "auto"]  # the handshake era (2025-11-25) and 2026-07-28 where the gateway offers it


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningGateway]:
    """One gateway for the module (each start launches the stdio server: seconds of CPU); every test names its
    own calls. A call timeout far beyond the cancellation test's wait: only the client's cancellation can end
    linger."""
    root = tmp_path_factory.mktemp("passthrough")
    config = base_config(mcp_upstream("up"), limits={"call_timeout": 120})
    async with run_gateway(write_gateway(root, config, {"p.yaml": POLICY})) as running:
        yield running


@contextlib.asynccontextmanager
async def client_of(gateway: Any, mode: str) -> AsyncIterator[Client]:
    """The SDK's client, as alice, in protocol ``mode``."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEYS['alice']}"},
                              timeout=httpx2.Timeout(30, read=60))
    async with http, Client(streamable_http_client(gateway.mcp_url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        yield client


async def direct_tools() -> dict[str, Any]:
    """The test upstream's tools as a direct connection lists them."""
    params = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM_SERVER)])
    async with Client(params, mode="legacy") as client:
        return {t.name: t for t in (await client.list_tools()).tools}


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_list_keeps_every_field_an_upstream_tool_has(gateway, mode):
    direct = await direct_tools()
    async with client_of(gateway, mode) as client:
        through = {t.name: t for t in (await client.list_tools(cache_mode="refresh")).tools}

    weather = through["up_weather"]
    assert weather.title == "Weather now"
    assert [i.src for i in weather.icons or []] == ["data:image/png;base64,iVBORw0KGgo="]
    assert weather.meta == {"example.com/owner": "tests"}
    assert weather.output_schema is not None and set(weather.output_schema["required"]) == {"city", "celsius"}
    # `execution` is a 2025-11-25 field: 2026-07-28 removed it, and the SDK leaves it out for that era.
    legacy = mode == "legacy"
    assert (weather.execution.task_support if weather.execution else None) == ("optional" if legacy else None)
    # Field for field as a direct connection sees them (the gateway also shows annotations.title as the title).
    ignored = {"name", "title"} if legacy else {"name", "title", "execution"}
    for name, tool in direct.items():
        ours = through[f"up_{name}"]
        if legacy and tool.execution is not None and tool.execution.task_support == "required":
            # a task-only tool is "optional" through the gateway, which runs the upstream task itself (test_tasks.py)
            tool = tool.model_copy(update={"execution": types.ToolExecution(task_support="optional")})
        assert ours.model_dump(exclude=ignored) == tool.model_dump(exclude=ignored), name
        assert ours.title == (tool.title or (tool.annotations.title if tool.annotations else None)), name


async def test_rest_tool_list_shows_the_output_schema(gateway, rest):
    tools = {t["name"]: t for t in (await rest(gateway).get("/v1/tools")).json()["tools"]}

    assert tools["up_weather"]["output_schema"]["properties"]["celsius"]["type"] == "number"
    assert tools["up_slow"]["output_schema"]["properties"]["result"]["type"] == "string"


@pytest.mark.parametrize("mode", ERAS)
async def test_results_validate_against_the_output_schema_through_the_gateway(gateway, mode):
    async with client_of(gateway, mode) as client:
        await client.list_tools()  # the client now knows the outputSchema and validates results against it
        real = await client.call_tool("up_weather", {"city": "Oslo"})
        fitting_skip = await client.call_tool("up_weather", {"city": "testville"})
        # A skip result that does not fit the schema would make the SDK client raise; it comes as an error.
        unfitting_skip = await client.call_tool("up_weather", {"city": "nowhere"})
        refused = await client.call_tool("up_weather", {"city": "forbidden"})
        held = await client.call_tool("up_weather", {"city": "held"})  # "pending" fits no tool's schema

    assert (real.is_error, real.structured_content) == (False, {"city": "Oslo", "celsius": 21.5})
    assert (fitting_skip.is_error, fitting_skip.structured_content) == (False, {"city": "testville", "celsius": 0})
    assert unfitting_skip.is_error is True and unfitting_skip.structured_content is None
    assert "dry run" in unfitting_skip.content[0].text  # type: ignore[union-attr]
    assert (unfitting_skip.meta or {}).get("gateway/skipped") is True
    assert refused.is_error is True and refused.content[0].text == "Not that city."  # type: ignore[union-attr]
    assert held.is_error is True and held.structured_content is None
    assert (held.meta or {}).get("gateway/pending") is True


@pytest.mark.parametrize("mode", ERAS)
async def test_upstream_progress_reaches_the_client(gateway, mode):
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async with client_of(gateway, mode) as client:
        result = await client.call_tool("up_steps", {"count": 3}, progress_callback=on_progress)
        quiet = await client.call_tool("up_steps", {"count": 2})  # no token given: nothing is sent, the call works

    assert result.content[0].text == "done in 3 steps"  # type: ignore[union-attr]
    assert heard == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]
    assert quiet.content[0].text == "done in 2 steps"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_cancelled_call_is_cancelled_upstream(gateway, mode, tmp_path, until):
    marker = tmp_path / f"linger-{mode}"

    async def says(word: str) -> bool:
        return marker.exists() and marker.read_text() == word

    async with client_of(gateway, mode) as client:
        call = asyncio.ensure_future(client.call_tool("up_linger", {"marker": str(marker)}))
        assert await until(lambda: says("started"), timeout=20)
        call.cancel()  # the SDK client sends notifications/cancelled for an abandoned request
        with contextlib.suppress(asyncio.CancelledError):
            await call
        assert await until(lambda: says("cancelled"), timeout=20)
    # The decision log says what happened: the intent, then an outcome that it was cancelled mid-run.
    events = [e for e in gateway.audit_events() if e.get("tool") == "up_linger"
              and str(marker) in str(e.get("final_args"))]
    assert [e["event"] for e in events] == ["call.intent", "call.outcome"]
    assert events[1]["verdict"] == "cancelled" and events[1]["upstream_outcome"]["status"] == "cancelled"
