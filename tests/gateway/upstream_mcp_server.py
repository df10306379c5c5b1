"""The upstream MCP server the gateway tests put behind the gateway (stdio, launched by the gateway).

Tools: echo, add, slow, fail, secret, delete_thing (destructive), pid, and register_extra, which adds
a tool named ``extra`` at runtime and sends ``notifications/tools/list_changed``; ``weather`` has every
field a tool definition can have (title, icons, _meta, execution, an object outputSchema), and
``steps`` sends a progress notification per step; ``linger`` waits until cancelled and says so in a file.
With ``UPSTREAM_TRACE_TOOL`` set, ``trace_context`` reports the W3C trace context its request's ``_meta`` carried.

If the file named by ``UPSTREAM_DOWN_FILE`` exists when the process starts, it exits at once: tests
use that to keep the gateway from relaunching an upstream they killed ("the upstream is down").
"""

from __future__ import annotations

import os
import sys

# Checked before the SDK is imported (which takes seconds), so "down" is quick to observe.
_DOWN_FILE = os.environ.get("UPSTREAM_DOWN_FILE")
if __name__ == "__main__" and _DOWN_FILE and os.path.exists(_DOWN_FILE):
    sys.exit(3)

import anyio  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp_types import Icon, Tool, ToolAnnotations, ToolExecution  # noqa: E402
from pydantic import BaseModel  # noqa: E402

# An AWS-style access key id (the documented example) and an email, for redaction tests.
SECRET_TEXT = "key AKIAIOSFODNN7EXAMPLE belongs to ops@example.com"

WEATHER_ICON = Icon(src="data:image/png;base64,iVBORw0KGgo=", mime_type="image/png", sizes=["16x16"])
WEATHER_META = {"example.com/owner": "tests"}


class _Server(MCPServer):
    """The SDK's server, with ``execution`` on ``weather`` (the decorator has no parameter for it)."""

    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        return [t.model_copy(update={"execution": ToolExecution(task_support="optional")}) if t.name == "weather"
                else t for t in tools]


server = _Server("test-upstream", version="0.1.0")


class Weather(BaseModel):
    """A forecast (its JSON schema becomes weather's outputSchema)."""

    city: str
    celsius: float


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """The sum of two integers."""
    return a + b


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then say how long."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def fail() -> str:
    """Always raises; the SDK turns that into an isError result."""
    raise RuntimeError("database exploded at /srv/internal/db.sqlite")


@server.tool()
def secret() -> str:
    """Text with a credential and an email in it."""
    return SECRET_TEXT


@server.tool(annotations=ToolAnnotations(title="Delete a thing", destructive_hint=True, read_only_hint=False))
def delete_thing(id: str) -> dict[str, str]:
    """Pretend to delete something."""
    return {"deleted": id}


@server.tool()
def pid() -> int:
    """This process's id, so a test can kill it."""
    return os.getpid()


@server.tool(title="Weather now", icons=[WEATHER_ICON], meta=WEATHER_META)
def weather(city: str) -> Weather:
    """The weather in a city (structured content that fits its outputSchema)."""
    return Weather(city=city, celsius=21.5)


@server.tool()
async def steps(ctx: Context, count: int = 3) -> str:
    """Report progress ``count`` times, then finish."""
    for i in range(1, count + 1):
        await ctx.report_progress(i, count, f"step {i} of {count}")
    return f"done in {count} steps"


@server.tool()
async def linger(marker: str) -> str:
    """Write "started" to the file ``marker``, wait a minute, and write "cancelled" there if cancelled first."""
    with open(marker, "w") as f:
        f.write("started")
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        with open(marker, "w") as f:
            f.write("cancelled")
        raise
    return "lingered"


def extra(text: str = "") -> str:
    """A tool that exists only after register_extra."""
    return f"extra:{text}"


@server.tool()
async def register_extra(ctx: Context) -> str:
    """Add the tool ``extra`` and tell the client the tool list changed."""
    server.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "registered"


def trace_context(ctx: Context) -> dict[str, str]:
    """The W3C trace context (traceparent, tracestate) this request's ``_meta`` carried."""
    meta = ctx.request_context.meta or {}
    return {key: str(meta[key]) for key in ("traceparent", "tracestate") if key in meta}


# Only when asked (the tracing tests set it in the upstream's env), so the usual tool list stays as it is.
if os.environ.get("UPSTREAM_TRACE_TOOL"):
    server.add_tool(trace_context, name="trace_context")


if __name__ == "__main__":
    server.run()
