"""Closing an MCP upstream never hangs, whatever state its connection is in (gateway/upstreams/mcp/upstream.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.upstreams.mcp.upstream import CANCEL_SECONDS, CLOSE_SECONDS, McpUpstream

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def silent() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An HTTP server on loopback that reads every request and never answers (a hung upstream), and an event
    set when the first request's bytes arrived."""
    asked = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while await reader.read(65536):
            asked.set()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp", asked
    finally:
        for writer in writers:
            writer.close()
        server.close()


@pytest.mark.parametrize("fast_calls", [True, False], ids=["lean", "sdk"])
async def test_a_close_during_a_connect_that_never_ends_returns_at_once(silent: tuple[str, asyncio.Event],
                                                                         fast_calls: bool) -> None:
    url, asked = silent
    upstream = McpUpstream("hung", url=url, fast_calls=fast_calls)
    starting = asyncio.create_task(upstream.start())
    await asyncio.wait_for(asked.wait(), 30)  # the connect sent its first request, which is never answered

    loop = asyncio.get_running_loop()
    closed = loop.time()
    await asyncio.wait_for(upstream.close(), CLOSE_SECONDS + CANCEL_SECONDS + 5)

    # a connect in progress is cancelled without the grace a connected upstream gets
    assert loop.time() - closed < CLOSE_SECONDS
    with pytest.raises(Exception, match="cannot connect"):  # and the start waiting on it is told so
        await asyncio.wait_for(starting, 5)
