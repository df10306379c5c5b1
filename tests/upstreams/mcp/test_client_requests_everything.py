"""The third-party reference server's requests to the client (sampling, elicitation, roots) and its log
messages, through the gateway, in both protocol eras (server-everything over stdio; see test_everything_server)."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from gateway_harness import RunningGateway, base_config, everything_upstream, run_gateway, write_gateway

from tests.frontends.mcp.test_client_requests import ALLOW, User, text

pytestmark = [pytest.mark.parametrize("mode", ["legacy", "2026-07-28"]), pytest.mark.session_loop]

ASKING_TOOLS = {"ev_trigger-sampling-request", "ev_trigger-elicitation-request", "ev_get-roots-list"}


@contextlib.asynccontextmanager
async def _serving(root: Path, upstream: dict[str, Any], **config: Any) -> AsyncIterator[RunningGateway]:
    """A gateway on server-everything for the module: each start launches the Node server (seconds of CPU), and
    what a test asks for lives in its own MCP sessions."""
    async with run_gateway(write_gateway(root, base_config(upstream, **config), {"p.yaml": ALLOW})) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningGateway]:
    # a round trip to the client and back runs through a Node server: give it more than the harness's 10 s
    async with _serving(tmp_path_factory.mktemp("everything-asks"), everything_upstream("ev"),
                        limits={"call_timeout": 60}) as running:
        yield running


class Alice(User):
    """Answers server-everything's form, whose one required field is ``name``."""

    async def elicitation(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Alice Example", "check": True})


async def test_the_tools_that_need_the_client_are_listed(gateway: Any, connect_mcp: Any, mode: str) -> None:
    """server-everything registers them only for a client that declared the capabilities: the gateway does."""
    async with connect_mcp(gateway, mode=mode) as conn:
        names = {t.name for t in (await conn.client.list_tools()).tools}
    assert ASKING_TOOLS <= names


async def test_a_denied_kind_is_not_declared_upstream(start_gateway: Any, configs: Any, connect_mcp: Any,
                                                      mode: str) -> None:
    gateway = await start_gateway(configs.base(configs.everything_upstream("ev", client_requests={
        "sampling": "deny", "elicitation": "deny"})), {"p.yaml": ALLOW})
    async with connect_mcp(gateway, mode=mode) as conn:
        names = {t.name for t in (await conn.client.list_tools()).tools}
    assert "ev_trigger-sampling-request" not in names
    assert "ev_trigger-elicitation-request" not in names
    assert "ev_get-roots-list" in names


async def test_sampling(gateway: Any, connect_mcp: Any, mode: str) -> None:
    alice = Alice("alice")
    async with connect_mcp(gateway, mode=mode, **alice.options()) as conn:
        result = await conn.client.call_tool("ev_trigger-sampling-request", {"prompt": "a haiku", "maxTokens": 20})
    assert not result.is_error
    assert "alice's model answers" in text(result)
    assert alice.prompts == ["Resource trigger-sampling-request context: a haiku"]


async def test_elicitation(gateway: Any, connect_mcp: Any, mode: str) -> None:
    alice = Alice("alice")
    async with connect_mcp(gateway, mode=mode, **alice.options()) as conn:
        result = await conn.client.call_tool("ev_trigger-elicitation-request", {})
    assert not result.is_error
    assert "Alice Example" in str(result.content)
    assert alice.questions == ["Please provide inputs for the following fields:"]


async def test_roots(start_gateway: Any, configs: Any, connect_mcp: Any, mode: str) -> None:
    """The server asks for roots 350 ms after connecting, then again in the call while it has none. The first
    is refused when no call is in flight then; if the call has already started, both are the caller's.
    A gateway of its own: a server that was given roots before does not ask again."""
    gateway = await start_gateway(configs.base(everything_upstream("ev"), limits={"call_timeout": 60}),
                                  {"p.yaml": ALLOW})
    alice = Alice("alice")
    async with connect_mcp(gateway, mode=mode, **alice.options()) as conn:
        result = await conn.client.call_tool("ev_get-roots-list", {})
    assert "file:///home/alice" in text(result)
    assert alice.roots_asked in (1, 2)


async def test_a_client_without_the_capabilities_is_not_asked(gateway: Any, connect_mcp: Any, mode: str) -> None:
    async with connect_mcp(gateway, mode=mode) as conn:
        result = await conn.client.call_tool("ev_trigger-sampling-request", {"prompt": "hi"})
        assert result.is_error
        assert "refused by the gateway" in text(result)
        assert not (await conn.client.call_tool("ev_get-sum", {"a": 1, "b": 2})).is_error


async def test_log_messages_reach_a_client_that_asked(gateway: Any, connect_mcp: Any, mode: str) -> None:
    alice = Alice("alice")
    level: dict[str, Any] = {} if mode == "legacy" else {"log_level": "debug"}
    async with connect_mcp(gateway, mode=mode, logging_callback=alice.logging, **level) as conn:
        if mode == "legacy":
            with warnings.catch_warnings():  # logging/setLevel: deprecated at 2026-07-28, current here
                warnings.simplefilter("ignore")
                await conn.client.set_logging_level("debug")
        try:
            await conn.client.call_tool("ev_toggle-simulated-logging", {})
            for _ in range(1000):  # up to 20 s on a loaded machine
                if alice.logs:
                    break
                await asyncio.sleep(0.02)
        finally:
            await conn.client.call_tool("ev_toggle-simulated-logging", {})  # stop it
    assert alice.logs, "the message sent during the call was not relayed"
    first = alice.logs[0]
    assert first.level in str(first.data).lower()  # "Debug-level message", "Alert level-message", ...


# --- tools that need the client (issue 18, item 22) ------------------------------------------------------

# server-everything lists these only to a client that declared the capability each asks for; the gateway, its
# client, declares them all, so without this config every caller was listed them.
NEEDS = {"get-roots-list": ["roots"], "trigger-sampling-request": ["sampling"],
         "trigger-elicitation-request": ["elicitation"]}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def needing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningGateway]:
    async with _serving(tmp_path_factory.mktemp("everything-needing"),
                        everything_upstream("ev", tools_need_client=NEEDS)) as running:
        yield running


async def test_a_client_that_declared_nothing_is_not_listed_the_tools_that_would_ask_it(
        needing: Any, connect_mcp: Any, rest: Any, mode: str) -> None:
    """Called anyway, such a tool is refused before it runs: get-roots-list answered a success with no roots."""
    async with connect_mcp(needing, mode=mode) as conn:
        names = {t.name for t in (await conn.client.list_tools()).tools}
        result = await conn.client.call_tool("ev_get-roots-list", {})
        assert not (await conn.client.call_tool("ev_get-sum", {"a": 1, "b": 2})).is_error
    assert not names & ASKING_TOOLS and "ev_get-sum" in names
    assert result.is_error and result.meta is not None and result.meta["gateway/decision"] == "client_unsupported"
    assert "needs to ask the client for its roots (MCP roots)" in text(result), text(result)
    listed = (await rest(needing).get("/v1/tools")).json()["tools"]  # a REST caller cannot be asked anything
    assert not {t["name"] for t in listed} & ASKING_TOOLS and "ev_get-sum" in {t["name"] for t in listed}


async def test_a_client_that_declared_the_capabilities_is_listed_the_tools_and_can_use_them(
        needing: Any, connect_mcp: Any, mode: str) -> None:
    alice = Alice("alice")
    async with connect_mcp(needing, mode=mode, **alice.options()) as conn:
        names = {t.name for t in (await conn.client.list_tools()).tools}
        result = await conn.client.call_tool("ev_get-roots-list", {})
    assert ASKING_TOOLS <= names
    assert not result.is_error and "file:///home/alice" in text(result)


async def test_a_client_that_declared_roots_only_is_listed_only_the_roots_tool(needing: Any, connect_mcp: Any,
                                                                               mode: str) -> None:
    alice = Alice("alice")
    async with connect_mcp(needing, mode=mode, list_roots_callback=alice.roots) as conn:
        names = {t.name for t in (await conn.client.list_tools()).tools}
        sampling = await conn.client.call_tool("ev_trigger-sampling-request", {"prompt": "hi"})
    assert names & ASKING_TOOLS == {"ev_get-roots-list"}
    assert sampling.is_error and "its model (MCP sampling)" in text(sampling)
    assert alice.prompts == []
