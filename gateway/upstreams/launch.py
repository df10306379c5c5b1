"""An HTTP upstream the gateway starts itself: a subprocess that must answer on its base URL.

For example services and single-box deployments, so one `gateway serve` brings up everything.
The process is stopped (terminate, then kill) when the gateway stops. It gets a minimal
environment, not the gateway's (``child_environment``). It is not launched when something already
listens on its port (calls would reach that other process), and while it is not running no call is
sent; the supervisor (gateway/upstreams/supervise.py) relaunches it when it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.core.errors import UpstreamDown
from gateway.core.limits import UPSTREAM_CHECK_TIMEOUT_SECONDS
from gateway.upstreams.base import (
    HealthChecked,
    ToolProgress,
    ToolResult,
    Upstream,
    UpstreamTool,
    listening,
    resolve_command,
)
from gateway.upstreams.environment import child_environment

__all__ = ["LaunchedUpstream"]

log = logging.getLogger("gateway.upstreams.launch")

# How long a launched service may take to accept connections.
READY_TIMEOUT_SECONDS = 20.0

# Once the port answers, the launched process must still be running this long later: a process that
# lost the race for the port to another one exits at once, and must not be taken for the listener.
_BIND_GRACE_SECONDS = 0.2


class LaunchedUpstream:
    """Wraps an upstream whose server is a subprocess started with the gateway."""

    def __init__(self, inner: Upstream, base_url: str, command: str, args: list[str],
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 env_passthrough: Iterable[str] = ()) -> None:
        self.inner = inner
        self.name = inner.name
        parts = urlsplit(base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._argv = [resolve_command(command), *args]
        # Not the gateway's environment: see gateway/upstreams/environment.py.
        self._env = child_environment(env or {}, env_passthrough)
        self._cwd = cwd
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        if self._process is not None:  # started again after a failed check: the old process goes first
            await self.close()
        # Whatever answers on the port now is not ours: calls would go to another process. Refuse.
        if await listening(self._host, self._port, UPSTREAM_CHECK_TIMEOUT_SECONDS):
            raise UpstreamDown(f"{self.name}: {self._host}:{self._port} is already in use by another process;"
                               " not launching (stop that process or change the upstream's base_url)",
                               "port already in use by another process")
        self._process = await asyncio.create_subprocess_exec(*self._argv, env=self._env, cwd=self._cwd)
        try:
            await self._wait_listening(self._process)
            await self.inner.start()
        except BaseException:
            await self.close()  # a half-started process is not left behind
            raise

    async def _wait_listening(self, process: asyncio.subprocess.Process) -> None:
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
        while True:
            if process.returncode is not None:
                raise _exited(self.name, process.returncode)
            if await listening(self._host, self._port, UPSTREAM_CHECK_TIMEOUT_SECONDS):
                # It may be another process that bound the port first, and ours is about to fail to bind.
                await asyncio.sleep(_BIND_GRACE_SECONDS)
                if process.returncode is not None:
                    raise _exited(self.name, process.returncode)
                return
            if asyncio.get_running_loop().time() > deadline:
                raise UpstreamDown(f"{self.name}: nothing answers on {self._host}:{self._port} within"
                                   f" {READY_TIMEOUT_SECONDS}s of the launch", "launched process not listening in time")
            await asyncio.sleep(0.1)

    async def check(self) -> None:
        """Down when the launched process has exited (then nothing of ours listens: see ``start``)."""
        process = self._process
        if process is None or process.returncode is not None:
            raise _exited(self.name, None if process is None else process.returncode)
        if isinstance(self.inner, HealthChecked):
            try:
                await self.inner.check()
            except UpstreamDown:
                # A process that stopped listening is usually exiting: say so, rather than "not reachable".
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_BIND_GRACE_SECONDS):
                        await process.wait()
                if process.returncode is not None:
                    raise _exited(self.name, process.returncode) from None
                raise

    async def close(self) -> None:
        await self.inner.close()
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            async with asyncio.timeout(5):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    def tools(self) -> list[UpstreamTool]:
        return self.inner.tools()

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float,
                   progress: ToolProgress | None = None) -> ToolResult:
        process = self._process
        if process is None or process.returncode is not None:
            # Not running: whatever may answer on its port now is some other process.
            raise _exited(self.name, None if process is None else process.returncode)
        return await self.inner.call(tool, arguments, timeout, progress)

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        self.inner.on_tools_changed(callback)


def _exited(name: str, code: int | None) -> UpstreamDown:
    if code is None:
        return UpstreamDown(f"{name}: the launched process is not running", "launched process not running")
    return UpstreamDown(f"{name}: the launched process exited with {code}", f"launched process exited with {code}")
