"""Test servers that stop in any order leave no stopped server behind the signal handlers.

A stopped server left behind SIGTERM made sse_starlette end every later SSE response in the process at
once: a session-scoped gateway then answered each new MCP ``initialize`` with an incomplete response.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator

import httpx2
import pytest
from loopback import serve_app
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route


async def _events(request: Request) -> EventSourceResponse:
    async def one() -> AsyncIterator[dict[str, str]]:
        yield {"data": "still-streaming"}

    return EventSourceResponse(one())


def _app() -> Starlette:
    return Starlette(routes=[Route("/events", _events)])


async def test_servers_stopped_out_of_order_leave_the_original_handler_and_sse_working() -> None:
    before = signal.getsignal(signal.SIGTERM)
    async with serve_app(_app(), lifespan="off") as lasting:
        async with contextlib.AsyncExitStack() as outer:
            inner = contextlib.AsyncExitStack()
            await outer.enter_async_context(serve_app(_app(), lifespan="off"))  # started first ...
            await inner.enter_async_context(serve_app(_app(), lifespan="off"))
            # ... stopped first, as a fixture's receiver torn down before the test's gateway
            await outer.aclose()
            await inner.aclose()
        handler = signal.getsignal(signal.SIGTERM)
        assert not getattr(getattr(handler, "__self__", None), "should_exit", False), "a stopped server's handler"
        async with httpx2.AsyncClient(base_url=lasting, timeout=10) as http:
            response = await http.get("/events")
        assert response.status_code == 200 and "data: still-streaming" in response.text
    # Equal, not identical: a server still serving from an earlier test (a session fixture) is put back as a
    # new bound method of the same server's handle_exit.
    assert signal.getsignal(signal.SIGTERM) == before


async def test_a_server_whose_shutdown_hangs_is_reported_with_where_it_waits() -> None:
    stuck = asyncio.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await _closing_an_upstream_that_never_answers(stuck)

    with pytest.raises(TimeoutError, match=r"(?s)did not stop within 0\.5s.*_closing_an_upstream_that_never_answers"):
        async with serve_app(Starlette(lifespan=lifespan), shutdown=0.5):
            pass


async def _closing_an_upstream_that_never_answers(never: asyncio.Event) -> None:
    await never.wait()
