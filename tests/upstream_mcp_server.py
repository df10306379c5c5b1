"""The upstream MCP server the gateway tests put behind the gateway (stdio, launched by the gateway).

Tools: echo, add, slow, fail, secret, delete_thing (destructive), pid, and register_extra, which adds
a tool named ``extra`` at runtime and sends ``notifications/tools/list_changed``; ``weather`` has every
field a tool definition can have (title, icons, _meta, execution, an object outputSchema), and
``steps`` sends a progress notification per step; ``linger`` waits until cancelled and says so in a file.
``research`` runs only as a task (MCP 2025-11-25 tasks, ``execution.taskSupport: required``): see
``_Tasks`` below; it writes what became of its task into the file ``marker``.

Resources: ``notes://public``, ``notes://secret`` and the template ``notes://users/{user}``; prompts:
``greet`` (argument ``name``) and ``confidential``; ``register_note`` adds ``notes://extra`` and sends
``notifications/resources/list_changed``.
``ask_model``, ``ask_user`` and ``ask_roots`` send the client sampling, elicitation and roots requests (whatever
it declared) and return its answer or its error as text; ``ask_model_later`` asks after its call has ended and
writes the outcome to a file; ``chatter`` sends a log message at each of four levels.
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

import asyncio  # noqa: E402
import logging  # noqa: E402
import secrets  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from mcp import MCPError  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.shared.message import ServerMessageMetadata  # noqa: E402
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
        support = {"weather": "optional", "research": "required"}
        return [t.model_copy(update={"execution": ToolExecution(task_support=support[t.name])}) if t.name in support
                else t for t in tools]


# Plain log lines on stderr: the SDK's default handler draws each traceback in a box (``up_fail`` logs one),
# which took seconds of CPU on a loaded machine, past the shared gateway's call timeout.
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
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


@server.resource("notes://public", name="public", title="Public notes", mime_type="text/plain")
def public_notes() -> str:
    """Notes anyone may read."""
    return "the public notes"


@server.resource("notes://secret", name="secret", title="Secret notes", mime_type="text/plain")
def secret_notes() -> str:
    """Notes only some may read."""
    return "the secret notes"


@server.resource("notes://users/{user}", name="user-notes", mime_type="text/plain")
def user_notes(user: str) -> str:
    """A user's notes (a resource template)."""
    return f"notes of {user}"


@server.prompt(title="Greeting")
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Please greet {name} warmly."


@server.prompt()
def confidential() -> str:
    """A prompt only some may get."""
    return "The confidential instructions."


def extra_notes() -> str:
    """A resource that exists only after register_note."""
    return "the extra notes"


@server.tool()
async def register_note(ctx: Context) -> str:
    """Add the resource ``notes://extra`` and tell the client the resource list changed."""
    server.resource("notes://extra", name="extra")(extra_notes)
    await ctx.session.send_resource_list_changed()
    return "registered"


@server.tool()
async def research(topic: str, seconds: float = 1.0, marker: str = "", extension_shape: bool = False) -> str:
    """A report on ``topic`` after ``seconds``; called only as a task (the listing says so, ``_Tasks`` enforces it)."""
    raise AssertionError("research runs through _Tasks")


class _Tasks:
    """Just enough of the 2025-11-25 tasks for ``research``: tools/call with ``task``, tasks/get|result|cancel.

    The SDK's server has no tasks, and its result check would refuse a CreateTaskResult from a tool handler, so a
    middleware answers a task-augmented tools/call itself.
    """

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, asyncio.Task[None]] = {}
        low = server._lowlevel_server
        low.middleware.append(self.middleware)
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            low.add_request_handler(method, _TaskId, getattr(self, method.split("/")[1]))

    async def middleware(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params or {}
        if ctx.method != "tools/call" or params.get("name") != "research":
            return await call_next(ctx)
        if "task" not in params:  # the spec's answer to a task-only tool called without a task
            raise MCPError(code=-32601, message="research must be called as a task")
        args = params.get("arguments") or {}
        now = datetime.now(UTC).isoformat()
        task = {"taskId": secrets.token_hex(8), "status": "working", "createdAt": now, "lastUpdatedAt": now,
                "ttl": params["task"].get("ttl"), "pollInterval": 100}
        self.tasks[task["taskId"]] = task
        self.runs[task["taskId"]] = asyncio.ensure_future(self.work(task, args))
        if args.get("extension_shape"):  # answer as the 2026-07-28 tasks extension does (polled with tasks/get)
            task["extension_shape"] = True
            return {"resultType": "task", **task, "ttlMs": task.pop("ttl"), "pollIntervalMs": task.pop("pollInterval")}
        return {"task": task}

    async def work(self, task: dict[str, Any], args: dict[str, Any]) -> None:
        marker = args.get("marker") or os.devnull
        with open(marker, "w") as f:
            f.write("started")
        try:
            await asyncio.sleep(float(args.get("seconds", 1.0)))
        except asyncio.CancelledError:
            with open(marker, "w") as f:
                f.write("cancelled")
            raise
        with open(marker, "w") as f:
            f.write("done")
        report = f"report on {args.get('topic')}"  # fits research's outputSchema, as its direct call would
        task["result"] = {"content": [{"type": "text", "text": report}], "structuredContent": {"result": report},
                          "isError": False}
        task["status"] = "completed"

    def find(self, task_id: str) -> dict[str, Any]:
        if task_id not in self.tasks:
            raise MCPError(code=-32602, message="no such task")
        return self.tasks[task_id]

    async def get(self, ctx: Any, params: _TaskId) -> dict[str, Any]:
        task = self.find(params.taskId)
        if task.get("extension_shape"):  # the result inline once completed
            return {k: v for k, v in task.items() if k != "extension_shape"}
        return {k: v for k, v in task.items() if k != "result"}

    async def result(self, ctx: Any, params: _TaskId) -> dict[str, Any]:
        task = self.find(params.taskId)
        run = self.runs[params.taskId]
        await asyncio.wait({run})
        if task["status"] != "completed":
            raise MCPError(code=-32603, message=f"task {task['status']}")
        return {**task["result"], "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task["taskId"]}}}

    async def cancel(self, ctx: Any, params: _TaskId) -> dict[str, Any]:
        task = self.find(params.taskId)
        self.runs[params.taskId].cancel()
        task["status"] = "cancelled"
        return {k: v for k, v in task.items() if k != "result"}


class _TaskId(BaseModel):
    taskId: str  # the wire name


_Tasks()


def _sampling(prompt: str, with_tools: bool = False) -> types.CreateMessageRequest:
    tools = [Tool(name="calculator", input_schema={"type": "object"})] if with_tools else None
    return types.CreateMessageRequest(params=types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
        max_tokens=50, tools=tools))


async def _ask(ctx: Context, request: types.ServerRequest, result: type[Any], on_call: bool = True) -> Any:
    """Send a request to the client whatever it declared, on the call's stream (or the connection's)."""
    related = ServerMessageMetadata(related_request_id=ctx.request_context.request_id) if on_call else None
    return await ctx.request_context.session.send_request(request, result, metadata=related)


async def _model_says(ctx: Context, prompt: str, on_call: bool = True, with_tools: bool = False) -> str:
    try:
        answer = await _ask(ctx, _sampling(prompt, with_tools), types.CreateMessageResult, on_call)
    except MCPError as exc:
        return f"refused: {exc.code} {exc}"
    return f"model said: {answer.content.text}"


@server.tool()
async def ask_model(ctx: Context, prompt: str, with_tools: bool = False) -> str:
    """Ask the client's model (sampling/createMessage, offering it a tool if ``with_tools``); what it said, or the
    error."""
    return await _model_says(ctx, prompt, with_tools=with_tools)


@server.tool()
async def ask_user(ctx: Context, question: str) -> str:
    """Ask the client's user (elicitation/create, form mode) and return the answer, or the error."""
    request = types.ElicitRequest(params=types.ElicitRequestFormParams(
        message=question, requested_schema={"type": "object", "properties": {"answer": {"type": "string"}}}))
    try:
        answer = await _ask(ctx, request, types.ElicitResult)
    except MCPError as exc:
        return f"refused: {exc.code} {exc}"
    return f"user {answer.action}: {(answer.content or {}).get('answer')}"


@server.tool()
async def ask_roots(ctx: Context) -> str:
    """Ask the client for its roots (roots/list) and return their URIs, or the error."""
    try:
        answer = await _ask(ctx, types.ListRootsRequest(), types.ListRootsResult)
    except MCPError as exc:
        return f"refused: {exc.code} {exc}"
    return "roots: " + " ".join(str(root.uri) for root in answer.roots)


@server.tool()
async def ask_roots_briefly(ctx: Context, seconds: float) -> str:
    """Ask the client for its roots (as ``ask_roots``), but give up after ``seconds`` and finish without them."""
    with anyio.move_on_after(seconds):
        try:
            answer = await _ask(ctx, types.ListRootsRequest(), types.ListRootsResult)
        except MCPError as exc:
            return f"refused: {exc.code} {exc}"
        return "roots: " + " ".join(str(root.uri) for root in answer.roots)
    return "no roots in time"


_later: set[Any] = set()


@server.tool()
async def ask_model_later(ctx: Context, prompt: str, marker: str) -> str:
    """Return at once, then ask the client's model on the connection; the outcome goes to the file ``marker``."""

    async def later() -> None:
        await anyio.sleep(0.3)
        outcome = await _model_says(ctx, prompt, on_call=False)
        with open(marker, "w") as f:
            f.write(outcome)

    task = asyncio.ensure_future(later())
    _later.add(task)
    task.add_done_callback(_later.discard)
    return "will ask"


@server.tool()
async def chatter(ctx: Context) -> str:
    """Send a log message at debug, info, warning and error (each naming its level), then finish."""
    for level in ("debug", "info", "warning", "error"):
        await ctx.log(level, f"chatter at {level}", logger_name="chatter")  # type: ignore[arg-type]
    return "chattered"


def trace_context(ctx: Context) -> dict[str, str]:
    """The W3C trace context (traceparent, tracestate) this request's ``_meta`` carried."""
    meta = ctx.request_context.meta or {}
    return {key: str(meta[key]) for key in ("traceparent", "tracestate") if key in meta}


# Only when asked (the tracing tests set it in the upstream's env), so the usual tool list stays as it is.
if os.environ.get("UPSTREAM_TRACE_TOOL"):
    server.add_tool(trace_context, name="trace_context")


if __name__ == "__main__":
    server.run()
