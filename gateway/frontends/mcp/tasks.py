"""MCP tasks at the gateway's endpoint: a tools/call answered with a task handle, polled by the client.

Both protocol eras (docs/gateway.md "Tasks"):

- 2025-11-25: the client asks for a task with ``params.task`` on ``tools/call`` and gets a ``CreateTaskResult``;
  then ``tasks/get``, ``tasks/result`` (held until the task ends), ``tasks/cancel`` and ``tasks/list``.
- 2026-07-28: the tasks extension (``io.modelcontextprotocol/tasks``, advertised in ``server/discover``). A
  client that declares it in a request's capabilities gets a task (``resultType: "task"``) when the call has not
  ended within ``TASK_GRACE_SECONDS`` (a held call, a long or task-only tool), else the plain result; then
  ``tasks/get`` (with the result inline), ``tasks/update`` and ``tasks/cancel``.

The call runs through the pipeline like any other (policies decide before any upstream work starts, the outcome
is audited with the task id as its call id when the client gave none). Tasks are the gateway's own: ids are
random, bound to the principal that created them (anyone else gets the answer for an unknown task), and no
upstream task id is ever shown. They live in memory, for their TTL.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, ValidationError

from gateway.core.clock import now, rfc3339_us
from gateway.core.errors import UnknownToolError
from gateway.core.limits import (
    DEFAULT_TASK_TIMEOUT_SECONDS,
    DEFAULT_TASK_TTL_MS,
    MAX_TASK_TTL_MS,
    MAX_TASKS_PER_PRINCIPAL,
    TASK_GRACE_SECONDS,
    TASK_POLL_INTERVAL_MS,
)
from gateway.frontends.identity import identity_of
from gateway.frontends.mcp.calls import ToolCalls
from gateway.pipeline import CallRequest

# The pipeline's request for a tools/call the SDK dispatched (``McpFrontend.call_request``).
CallRequestOf = Callable[[ServerRequestContext[Any, Any], types.CallToolRequestParams], Awaitable[CallRequest]]

__all__ = ["TASKS_EXTENSION", "McpTasks", "listed_execution", "offers_tasks", "with_tasks"]

log = logging.getLogger("gateway.frontends.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
MISSING_CAPABILITY = -32021  # 2026-07-28: Missing Required Client Capability
NOT_FOUND = "Failed to retrieve task: Task not found"
_TERMINAL = frozenset({"completed", "failed", "cancelled"})

# The 2025-11-25 server capability: tools/call may be task-augmented; tasks can be listed and cancelled.
LEGACY_CAPABILITY = types.ServerTasksCapability(
    list=types.TasksListCapability(), cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())))


def with_tasks(options: InitializationOptions) -> InitializationOptions:
    """The handshake's capabilities with the 2025-11-25 ``tasks`` capability."""
    options.capabilities.tasks = LEGACY_CAPABILITY
    return options


def listed_execution(execution: dict[str, Any] | None, task_client: bool) -> dict[str, Any] | None:
    """A tool's ``execution`` as the gateway lists it: a task-only upstream tool is "optional" here, since the
    gateway runs the upstream task itself for a client that calls it without one; to a 2025-11-25 client that
    declared tasks every tool is "optional" (any call may become a task: a held one, a long one)."""
    if task_client or (execution and execution.get("taskSupport") == "required"):
        return {**(execution or {}), "taskSupport": "optional"}
    return execution


def offers_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this is a 2025-11-25 client that declared the ``tasks`` capability at its handshake."""
    capabilities = ctx.session.client_capabilities
    return not _modern(ctx) and capabilities is not None and capabilities.tasks is not None


class _TaskIdParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    taskId: str  # the wire name


class _ListParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    cursor: str | None = None


@dataclass(slots=True)
class GatewayTask:
    """One tools/call that runs as a task."""

    id: str
    principal: str
    tool: str
    ttl_ms: int
    created: float = field(default_factory=now)
    updated: float = field(default_factory=now)
    status: str = "working"
    message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    runner: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def finish(self, status: str, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
               message: str | None = None) -> None:
        """Move to a terminal status (the first one wins: a cancelled task stays cancelled)."""
        if self.status in _TERMINAL:
            return
        self.status, self.result, self.error, self.message = status, result, error, message
        self.updated = now()
        self.ended.set()

    def expired(self, now: float) -> bool:
        """Whether its TTL has passed (a running task is kept until it ends)."""
        return self.status in _TERMINAL and now > self.created + self.ttl_ms / 1000

    def wire(self, modern: bool) -> dict[str, Any]:
        """The task as the client's protocol era shows it (``Task``)."""
        status = self.status
        if not modern and status == "completed" and (self.result or {}).get("isError"):
            status = "failed"  # 2025-11-25: a tool result with isError fails the task
        body: dict[str, Any] = {"taskId": self.id, "status": status, "createdAt": rfc3339_us(self.created),
                                "lastUpdatedAt": rfc3339_us(self.updated)}
        if self.message:
            body["statusMessage"] = self.message
        if modern:
            body |= {"ttlMs": self.ttl_ms, "pollIntervalMs": TASK_POLL_INTERVAL_MS}
        else:
            body |= {"ttl": self.ttl_ms, "pollInterval": TASK_POLL_INTERVAL_MS}
        return body


class TaskTable:
    """The gateway's tasks, each bound to the principal that created it."""

    def __init__(self, max_per_principal: int = MAX_TASKS_PER_PRINCIPAL) -> None:
        self.max_per_principal = max_per_principal
        self._tasks: dict[str, GatewayTask] = {}

    def create(self, principal: str, tool: str, ttl_ms: int) -> GatewayTask:
        """A new task with an unguessable id; refused when the principal holds too many."""
        self._expire()
        if sum(1 for t in self._tasks.values() if t.principal == principal) >= self.max_per_principal:
            raise MCPError(code=types.INVALID_REQUEST,
                           message=f"too many tasks: at most {self.max_per_principal} at a time")
        task = GatewayTask(secrets.token_urlsafe(24), principal, tool, ttl_ms)
        self._tasks[task.id] = task
        return task

    def find(self, principal: str, task_id: str) -> GatewayTask:
        """The principal's task by id; another principal's task is answered exactly like an unknown one."""
        self._expire()
        task = self._tasks.get(task_id)
        if task is None or not secrets.compare_digest(task.principal, principal):
            raise MCPError(code=types.INVALID_PARAMS, message=NOT_FOUND)
        return task

    def of(self, principal: str) -> list[GatewayTask]:
        """The principal's tasks, oldest first."""
        self._expire()
        return [t for t in self._tasks.values() if t.principal == principal]

    def of_all(self) -> list[GatewayTask]:
        """Every task, whoever holds it."""
        return list(self._tasks.values())

    def forget(self, task: GatewayTask) -> None:
        """Drop a task that was never shown to the client."""
        self._tasks.pop(task.id, None)

    def _expire(self) -> None:
        at = now()
        for task_id in [t.id for t in self._tasks.values() if t.expired(at)]:
            del self._tasks[task_id]


class McpTasks:
    """Adds tasks to the MCP frontend's server: a middleware on tools/call and the tasks/* methods."""

    def __init__(self, server: Server[Any], calls: ToolCalls, call_request: CallRequestOf,
                 table: TaskTable | None = None, *, timeout: float = DEFAULT_TASK_TIMEOUT_SECONDS) -> None:
        self.calls = calls
        self.call_request = call_request
        self.timeout = timeout
        self.table = table or TaskTable()
        server.middleware.append(self.middleware)
        server.extensions[TASKS_EXTENSION] = {}
        server.add_request_handler("tasks/get", _TaskIdParams, self._get)
        server.add_request_handler("tasks/result", _TaskIdParams, self._result)
        server.add_request_handler("tasks/cancel", _TaskIdParams, self._cancel)
        server.add_request_handler("tasks/update", _TaskIdParams, self._update)
        server.add_request_handler("tasks/list", _ListParams, self._list)

    async def aclose(self) -> None:
        """Cancel the calls of tasks still running (the gateway is stopping)."""
        running = [t.runner for t in self.table.of_all() if t.runner is not None and not t.runner.done()]
        for runner in running:
            runner.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    # -- creation -------------------------------------------------------------------------------

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The server middleware on tools/call: a call the client asked to run as a task becomes one."""
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        raw = dict(ctx.params or {})
        requested = raw.get("task")
        if modern:
            if not _declared(ctx):
                return await call_next(ctx)
            raw.pop("task", None)  # 2026-07-28: the legacy opt-in is ignored
            ttl = DEFAULT_TASK_TTL_MS
        elif isinstance(requested, dict):
            ttl = _ttl(requested.get("ttl"))
        else:
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError:
            return await call_next(ctx)  # the SDK's own answer to malformed params
        if self.calls.gateway.tool(params.name) is None:
            return await call_next(ctx)  # an unknown tool is a protocol error, not a task
        request = await self.call_request(ctx, params)
        task = self.table.create(request.principal.key, params.name, ttl)
        # The call outlives this HTTP request: no keep-alives and no questions on it (the upstream's own progress
        # is relayed while the request lasts, best effort: a quick call that needs no task keeps its progress).
        request.progress = request.elicit = None
        request.wait_seconds = ttl / 1000  # a held call waits for its decision, up to the task's TTL
        request.holds_connection = False  # ... on no connection: not in the principal's held calls
        request.timeout = self.timeout  # a task's tool may run longer than a call a client waits on
        request.task_id = task.id  # the audit events name the task
        if not request.call_id_given:
            request.call_id = task.id
        task.runner = asyncio.create_task(self._run(task, request, params.name), name=f"mcp-task-{task.id[:8]}")
        if modern:
            done, _ = await asyncio.wait({task.runner}, timeout=TASK_GRACE_SECONDS)
            if done and task.result is not None:
                self.table.forget(task)
                return {**task.result, "resultType": "complete"}
            return {**task.wire(modern=True), "resultType": "task"}
        return {"task": task.wire(modern=False)}

    async def _run(self, task: GatewayTask, request: CallRequest, name: str) -> None:
        try:
            outcome = await self.calls.gateway.call(request)
            result = self.calls.tool_result(name, outcome)
            task.finish("completed", result=result.model_dump(by_alias=True, mode="json", exclude_none=True))
        except asyncio.CancelledError:
            task.finish("cancelled", message="The task was cancelled.")
            raise
        except UnknownToolError as exc:
            task.finish("failed", error={"code": types.INVALID_PARAMS, "message": str(exc)}, message=str(exc))
        except Exception:
            log.exception("task %s (%s) failed inside the gateway", task.id[:8], name)
            task.finish("failed", error={"code": types.INTERNAL_ERROR, "message": "The gateway failed."},
                        message="The gateway failed.")

    # -- the tasks/* methods ------------------------------------------------------------------

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> GatewayTask:
        _require_extension(ctx)
        return self.table.find(_principal(ctx), task_id)

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: _TaskIdParams) -> dict[str, Any]:
        task = self._find(ctx, params.taskId)
        modern = _modern(ctx)
        body = task.wire(modern)
        if modern and task.status == "completed":
            body["result"] = task.result
        elif modern and task.status == "failed":
            body["error"] = task.error
        return body

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: _TaskIdParams) -> dict[str, Any]:
        if _modern(ctx):  # removed by the tasks extension: the result is inline in tasks/get
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="tasks/result")
        task = self._find(ctx, params.taskId)
        await task.ended.wait()  # 2025-11-25: held until the task ends
        if task.result is None:
            error = task.error or {"code": types.INTERNAL_ERROR, "message": task.message or "The task was cancelled."}
            raise MCPError(code=error["code"], message=error["message"])
        meta = {**(task.result.get("_meta") or {}), RELATED_TASK_META: {"taskId": task.id}}
        return {**task.result, "_meta": meta}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: _TaskIdParams) -> dict[str, Any]:
        task = self._find(ctx, params.taskId)
        modern = _modern(ctx)
        if task.status in _TERMINAL:
            if modern:
                return {}  # an acknowledgement; the task's status says what became of it
            raise MCPError(code=types.INVALID_PARAMS, message=f"Cannot cancel task: already {task.status}")
        task.finish("cancelled", message="The task was cancelled.")
        if task.runner is not None:
            task.runner.cancel()  # the pipeline records the cancelled call; an upstream task is cancelled too
        return {} if modern else task.wire(modern=False)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: _TaskIdParams) -> dict[str, Any]:
        if not _modern(ctx):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="tasks/update")
        self._find(ctx, params.taskId)
        return {}  # the gateway's tasks never ask for input: every response is for no outstanding request

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: _ListParams) -> dict[str, Any]:
        if _modern(ctx):  # the tasks extension has no tasks/list
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="tasks/list")
        return {"tasks": [t.wire(modern=False) for t in self.table.of(_principal(ctx))]}


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this 2026-07-28 request's client declared the tasks extension."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {})


def _require_extension(ctx: ServerRequestContext[Any, Any]) -> None:
    if _modern(ctx) and not _declared(ctx):
        raise MCPError(code=MISSING_CAPABILITY, message="Missing required client capability",
                       data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})


def _principal(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    if request is None:
        raise MCPError(code=types.INTERNAL_ERROR, message="the gateway serves MCP over HTTP only")
    return identity_of(request.scope).principal.key


def _ttl(value: Any) -> int:
    """The TTL a 2025-11-25 client asked for, within the gateway's bounds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return DEFAULT_TASK_TTL_MS
    return int(min(value, MAX_TASK_TTL_MS))

