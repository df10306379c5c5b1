"""An HTTP upstream the gateway starts itself: a subprocess that must answer on its base URL.

For example services and single-box deployments, so one `gateway serve` brings up everything.
The process is stopped (terminate, then kill) when the gateway stops. It gets a minimal
environment, not the gateway's (``child_environment``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import UpstreamError
from gateway.upstreams.base import ToolResult, Upstream, UpstreamTool, resolve_command
from gateway.upstreams.environment import child_environment

__all__ = ["LaunchedUpstream"]

log = logging.getLogger("gateway.upstreams.launch")

# How long a launched service may take to accept connections.
READY_TIMEOUT_SECONDS = 20.0


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
        self._process = await asyncio.create_subprocess_exec(*self._argv, env=self._env, cwd=self._cwd)
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_SECONDS
        while True:
            if self._process.returncode is not None:
                raise UpstreamError(f"{self.name}: launched process exited with {self._process.returncode}")
            try:
                _, writer = await asyncio.open_connection(self._host, self._port)
                writer.close()
                await writer.wait_closed()
                break
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise UpstreamError(f"{self.name}: nothing answers on {self._host}:{self._port}") from None
                await asyncio.sleep(0.1)
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    def tools(self) -> list[UpstreamTool]:
        return self.inner.tools()

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        return await self.inner.call(tool, arguments, timeout)

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        self.inner.on_tools_changed(callback)
