"""Fixtures for the end-to-end flows with real clients in their default settings; 127.0.0.1 only.

    upstream   ``CountingUpstream`` (tests/approval_support.py): the MCP server behind the gateway as
               ``ops``; it records every run, so "ran exactly once" is read from the upstream itself
    e2e        ``E2E``: gateways in front of it (``await e2e.start(policy)``), the approver API, and the
               clients: the MCP SDK opening a session per call (what LangChain's MCP adapters do by
               default), the SDK's ``Client`` in each era, and the MCP Inspector CLI from npm

Every async test and fixture here shares one event loop per module, where the upstream lives.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from e2e_clients import E2E, CountingUpstream


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run this folder's async tests in one loop per module, where the upstream lives."""
    here = Path(__file__).parent
    for item in items:
        if pytest_asyncio.is_async_test(item) and here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def upstream() -> AsyncIterator[CountingUpstream]:
    """The MCP upstream behind every gateway here."""
    async with CountingUpstream.serving() as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def e2e(tmp_path: Path, upstream: CountingUpstream) -> AsyncIterator[E2E]:
    """An ``E2E`` for one test: the upstream reset, gateways stopped at the end."""
    upstream.reset()
    async with contextlib.AsyncExitStack() as stack:
        yield E2E(tmp_path, upstream, stack)
