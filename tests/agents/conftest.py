"""Fixtures for driving real agent frameworks through the gateway; everything on 127.0.0.1.

The fake model and the upstream are started once per module; each test gets a ``Stage``
(tests/agents/agent_stage.py) that starts its gateways and runs its agents. All async tests and fixtures
in this folder share one event loop per module, where those servers live.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from agent_stage import STEP_SECONDS, CountingUpstream, Stage
from fake_model import FakeModel
from loopback import serve_app


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run this folder's async tests in one loop per module, where the fake model and upstream live."""
    here = Path(__file__).parent
    for item in items:
        if pytest_asyncio.is_async_test(item) and here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fake_model() -> AsyncIterator[tuple[FakeModel, str]]:
    """The scripted model and its base URL."""
    model = FakeModel()
    async with serve_app(model.app(), lifespan="off", startup=STEP_SECONDS) as url:
        yield model, url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def counting_upstream() -> AsyncIterator[CountingUpstream]:
    """The MCP upstream behind every gateway here."""
    async with CountingUpstream.serving() as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def stage(tmp_path: Path, fake_model: tuple[FakeModel, str],
                counting_upstream: CountingUpstream) -> AsyncIterator[Stage]:
    """A ``Stage`` for one test: the upstream reset, no hooks, gateways stopped at the end."""
    model, url = fake_model
    model.hooks.clear()
    counting_upstream.reset()
    async with contextlib.AsyncExitStack() as stack:
        yield Stage(tmp_path, model, url, counting_upstream, stack)
