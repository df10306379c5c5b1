"""What an upstream is: a named source of tools that can run a call and give back a result."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["HealthChecked", "ToolProgress", "ToolResult", "Upstream", "UpstreamTool", "listening",
           "needs_caller_token", "resolve_command", "text_result"]

# Where an upstream's progress notifications for one call go: (progress, total, message), as MCP sends them.
ToolProgress = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class UpstreamTool:
    """A tool as its upstream describes it (before the gateway names it)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    title: str | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    # The rest of an MCP tool definition, relayed to MCP clients as the upstream sent it.
    icons: tuple[dict[str, Any], ...] = ()
    execution: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    # What the tool asks its caller's client mid-call ("sampling", "elicitation", "roots"; upstream config
    # ``tools_need_client``): only a client that declared these can use it.
    needs_client: frozenset[str] = frozenset()


@dataclass(slots=True)
class ToolResult:
    """A tool's result in MCP's terms: content blocks, optional structured content, error flag."""

    content: list[dict[str, Any]] = field(default_factory=list)
    structured: Any = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text blocks joined, as response-stage rules read ``result.text``."""
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")


def text_result(value: Any, *, is_error: bool = False) -> ToolResult:
    """A result whose text is ``value`` (JSON for non-strings) and whose structure is the value."""
    if isinstance(value, str):
        return ToolResult([{"type": "text", "text": value}], None, is_error)
    text = json.dumps(value, ensure_ascii=False, default=str)
    structured = value if isinstance(value, dict) else {"result": value}
    return ToolResult([{"type": "text", "text": text}], structured, is_error)


def resolve_command(command: str) -> str:
    """A launched program's path: "python" means the gateway's own interpreter, so that example
    services run inside the gateway's virtualenv whether or not it is activated."""
    return sys.executable if command in ("python", "python3") else command


class Upstream(Protocol):
    """A source of tools; raises ``UpstreamError`` when it cannot run a call."""

    name: str

    async def start(self) -> None:
        """Connect (or launch) and learn the tool list."""
        ...

    async def close(self) -> None:
        """Release connections and subprocesses."""
        ...

    def tools(self) -> list[UpstreamTool]:
        """The tools known now."""
        ...

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float,
                   progress: ToolProgress | None = None) -> ToolResult:
        """Run one call; the tool's own failure is a result with ``is_error``; ``progress`` hears its progress."""
        ...

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        """Ask to be told when the tool list changes."""
        ...


def needs_caller_token(upstream: Upstream) -> bool:
    """Whether ``upstream`` can run a call only for a caller with a verified token (not an API key, not anonymous).

    An upstream whose credentials are made from its caller's own token (``auth: token_exchange``: HttpUpstream,
    McpUpstream) says so with a ``needs_caller_token`` property; any other has none. Asked on every call, so it is
    an attribute read, not an ``isinstance`` of a runtime-checkable protocol (tens of microseconds)."""
    return getattr(upstream, "needs_caller_token", False) is True


@runtime_checkable
class HealthChecked(Protocol):
    """An upstream that can tell whether it still serves (the supervisor asks it now and then)."""

    async def check(self) -> None:
        """Return when the upstream serves; raise ``UpstreamDown`` (with a public reason) when it does not."""
        ...


async def listening(host: str, port: int, timeout: float) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (nothing is sent: a probe has no side effects)."""
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:  # the peer reset the connection it had just accepted: it was listening all the same
        pass
    return True
