"""One way to run an ASGI app for a test: uvicorn on a free port of 127.0.0.1, in this event loop.

Imported by name (``from loopback import serve_app``) by the conftests and test helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import os
import signal
import sys
import threading
import traceback
import types
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Literal

import uvicorn
from uvicorn.server import HANDLED_SIGNALS

__all__ = ["HOST", "serve_app"]

HOST = "127.0.0.1"

_live: list[uvicorn.Server] = []  # the servers serving now, oldest first (main thread only)
_before: dict[int, Any] = {}  # the signal handlers from before the first of them


class _Server(uvicorn.Server):
    """uvicorn's server, whose signal handlers stay right when test servers overlap and stop in any order.

    uvicorn puts back the handler it replaced when it stops; when servers do not stop last-started-first
    (a fixture's server outliving the test's), that is a stopped server's ``handle_exit``, left for good.
    sse_starlette reads ``should_exit`` of the server behind the SIGTERM handler and ends every SSE
    response in the process while it is true: every later MCP request on a session-scoped gateway
    would end without a response. Here the handler is always the newest live server's, or the original.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        if not _live:
            _before.update({sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS})
        _live.append(self)
        _install(self.handle_exit)
        try:
            yield
        finally:
            _live.remove(self)
            _install(_live[-1].handle_exit if _live else None)


def _install(handler: Callable[..., Any] | None) -> None:
    """Route the handled signals to ``handler``, or back to the handlers from before any server (None)."""
    for sig in HANDLED_SIGNALS:
        signal.signal(sig, handler if handler is not None else _before[sig])


@contextlib.asynccontextmanager
async def serve_app(app: Any, *, lifespan: Literal["on", "off"] = "on", startup: float = 30.0,
                    grace: float = 2.0, shutdown: float = 10.0,
                    options: Mapping[str, Any] | None = None, port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` until the block ends; yields its base URL.

    ``options`` are more ``uvicorn.Config`` settings (the gateway's come from ``gateway.app.server_options``).
    ``port`` 0 (the default) picks a free port; a test that needs a server to appear on a known port names it.

    ``startup`` bounds the wait for uvicorn to listen (a lifespan that launches an upstream can take
    seconds on a busy machine); requests still running at shutdown are cancelled after ``grace``.
    """
    settings: dict[str, Any] = {"ws": "none", **(options or {})}
    config = uvicorn.Config(app, host=HOST, port=port, lifespan=lifespan, log_config=None, log_level="warning",
                            timeout_graceful_shutdown=grace, **settings)
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(startup):
            while not server.started:
                if task.done():
                    task.result()  # re-raises why uvicorn stopped
                    raise RuntimeError("uvicorn stopped before it started serving")
                await asyncio.sleep(0.005)
        # port=0 lets the OS pick a free port atomically; read back which one it chose.
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        done, _ = await asyncio.wait({task}, timeout=shutdown)
        if not done:  # what it waits on, taken before the cancel unwinds it
            hung = _stacks()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise TimeoutError(f"uvicorn did not stop within {shutdown}s; still running:\n{hung}")
        task.result()


def _stacks() -> str:
    """Where a hung shutdown waits: each task's chain of awaits, every suspended coroutine or async generator
    of the gateway's or the tests' own code (a chain stops at an async generator's ``anext``), every thread."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        out.write(f"task {task.get_name()}:\n{''.join(_awaits(task.get_coro()))}")
    out.write("suspended here:\n")
    for thing in gc.get_objects():
        if not isinstance(thing, types.CoroutineType | types.AsyncGeneratorType):
            continue
        frame = thing.cr_frame if isinstance(thing, types.CoroutineType) else thing.ag_frame
        if frame is not None and any(part in frame.f_code.co_filename for part in _OURS):
            out.write(_where(frame))
    for thread_id, frame in sys._current_frames().items():
        out.write(f"thread {thread_id}:\n{''.join(traceback.format_stack(frame, limit=12))}")
    return out.getvalue()


_OURS = (f"{os.sep}gateway{os.sep}", f"{os.sep}tests{os.sep}")


def _awaits(awaitable: Any) -> list[str]:
    """The frames of a coroutine and of what it awaits, outermost first."""
    lines = []
    while awaitable is not None:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None) \
            or getattr(awaitable, "ag_frame", None)
        if frame is not None:
            lines.append(_where(frame))
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None) \
            or getattr(awaitable, "ag_await", None)
    return lines


def _where(frame: Any) -> str:
    return f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}\n"
