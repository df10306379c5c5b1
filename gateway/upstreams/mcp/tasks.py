"""Calling an upstream tool that runs only as a task (MCP 2025-11-25 tasks, ``execution.taskSupport: required``).

The gateway drives the upstream's task itself: ``tools/call`` with a ``task`` parameter, then ``tasks/result``,
which the server holds until the task ends. So to the pipeline it is one call like any other: policies decide
before the upstream task exists, the result goes through the response stage, and the upstream's task id never
leaves the gateway (clients see the gateway's own task ids, docs/gateway.md "Tasks"). A call that is cancelled
or times out cancels the upstream task.

The SDK's client validates ``tools/call`` results as ``CallToolResult`` and has no tasks API, so these requests
go through the session's raw channel, as the SDK's own ``subscriptions/listen`` driver does. An upstream that
answers in the 2026-07-28 tasks extension's shape (``resultType: "task"``) is polled with ``tasks/get``.

At 2026-07-28 a tool has no ``execution``: task support is the tasks extension, which a server declares in
``server/discover`` for all its tools. The gateway declares it back (``TasksExtension``) to such an upstream, so
any ``tools/call`` may answer ``resultType: "task"``, which the SDK's client hands to the extension's claim: the
task is polled to its end like above, and the call returns its result. Its tools are listed with ``taskSupport:
"optional"`` (``execution_at``), which is what the gateway offers for them: a call with or without a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Literal

import mcp_types as types
from mcp import Client, ClientSession, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.dispatcher import CallOptions
from pydantic import ConfigDict, Field

from gateway.core.limits import (
    UPSTREAM_TASK_CANCEL_SECONDS,
    UPSTREAM_TASK_GET_SECONDS,
    UPSTREAM_TASK_POLL_SECONDS,
    UPSTREAM_TASK_TTL_MS,
)
from gateway.upstreams.mcp._sdk import session_hooks
from gateway.upstreams.mcp.eras import is_modern

__all__ = ["TASKS_EXTENSION", "TasksExtension", "call_as_task", "execution_at", "needs_task"]

log = logging.getLogger("gateway.upstreams.mcp")


TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def needs_task(execution: dict[str, Any] | None) -> bool:
    """Whether a tool with this ``execution`` can only be called as a task."""
    return bool(execution) and (execution or {}).get("taskSupport") == "required"


async def _request(session: ClientSession, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    hooks = session_hooks(session)
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {"timeout": timeout}
    hooks.stamp(data, opts)  # the session's per-era envelope (protocol version header, _meta)
    return await hooks.send_raw_request(method, data.get("params"), opts)


async def call_as_task(session: ClientSession, tool: str, arguments: dict[str, Any],
                       timeout: float) -> types.CallToolResult:
    """Run ``tool`` as an upstream task and return its result (a server that answers at once is taken as it is)."""
    created = await _request(session, "tools/call",
                             {"name": tool, "arguments": arguments, "task": {"ttl": UPSTREAM_TASK_TTL_MS}}, timeout)
    task = created.get("task")
    if created.get("resultType") == "task" and isinstance(created.get("taskId"), str):
        task_id: str = created["taskId"]
        poll = _poll  # the 2026-07-28 tasks extension: tasks/get until the task ends, the result inline
    elif isinstance(task, dict) and isinstance(task.get("taskId"), str):
        task_id, poll = task["taskId"], _result
    else:
        return types.CallToolResult.model_validate(created, by_name=False)
    try:
        result = await poll(session, task_id, timeout)
    except BaseException:
        # Cancelled or failed while the upstream works: the upstream task must not run on unobserved.
        await _cancel(session, task_id)
        raise
    result.pop("_meta", None)  # io.modelcontextprotocol/related-task: the upstream's id stays here
    return types.CallToolResult.model_validate(result, by_name=False)


async def _result(session: ClientSession, task_id: str, timeout: float) -> dict[str, Any]:
    """2025-11-25: tasks/result waits for the end of the task and answers what tools/call would have."""
    return await _request(session, "tasks/result", {"taskId": task_id}, timeout)


async def _poll(session: ClientSession, task_id: str, timeout: float) -> dict[str, Any]:
    """2026-07-28: tasks/get at the suggested interval until the task ends."""
    while True:
        got = await _request(session, "tasks/get", {"taskId": task_id}, timeout)
        status = got.get("status")
        if status == "completed" and isinstance(got.get("result"), dict):
            result: dict[str, Any] = got["result"]
            return result
        if status in ("failed", "cancelled"):
            found = got.get("error")
            error: dict[str, Any] = found if isinstance(found, dict) else {}
            raise MCPError(code=int(error.get("code", types.INTERNAL_ERROR)),
                           message=str(error.get("message") or got.get("statusMessage") or f"task {status}"))
        interval = got.get("pollIntervalMs")
        wait = interval / 1000 if isinstance(interval, int | float) and interval > 0 else UPSTREAM_TASK_POLL_SECONDS
        await asyncio.sleep(min(wait, UPSTREAM_TASK_POLL_SECONDS * 10))


async def _cancel(session: ClientSession, task_id: str) -> None:
    async def cancel() -> None:
        with contextlib.suppress(Exception):
            await _request(session, "tasks/cancel", {"taskId": task_id}, UPSTREAM_TASK_CANCEL_SECONDS)

    sent = asyncio.ensure_future(cancel())
    try:
        await asyncio.shield(sent)
    except asyncio.CancelledError:
        log.info("upstream task cancel sent in the background")


def execution_at(client: Client, execution: dict[str, Any] | None) -> dict[str, Any] | None:
    """A tool's ``execution`` as the gateway lists it: at 2026-07-28, from the server's tasks extension."""
    if execution is not None or not is_modern(client):
        return execution
    extensions = client.server_capabilities.extensions or {}
    return {"taskSupport": "optional"} if TASKS_EXTENSION in extensions else None


class _CreatedTask(types.Result):
    """The tasks extension's answer to a ``tools/call`` that became a task (only what polling needs)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")


async def _finish(created: _CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    """Poll the upstream's task to its end; cancel it when the call is cancelled or fails meanwhile."""
    try:
        result = await _poll(ctx.session, created.task_id, UPSTREAM_TASK_GET_SECONDS)
    except BaseException:
        await _cancel(ctx.session, created.task_id)
        raise
    result.pop("_meta", None)  # io.modelcontextprotocol/related-task: the upstream's id stays here
    return types.CallToolResult.model_validate(result, by_name=False)


class TasksExtension(ClientExtension):
    """The 2026-07-28 tasks extension, declared to upstreams: a task answer is polled to its result."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=_CreatedTask, resolve=_finish),)
