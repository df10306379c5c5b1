"""Calling an upstream tool that runs only as a task (MCP 2025-11-25 tasks, ``execution.taskSupport: required``).

The gateway drives the upstream's task itself: ``tools/call`` with a ``task`` parameter, then ``tasks/result``,
which the server holds until the task ends. So to the pipeline it is one call like any other: policies decide
before the upstream task exists, the result goes through the response stage, and the upstream's task id never
leaves the gateway (clients see the gateway's own task ids, docs/gateway.md "Tasks"). A call that is cancelled
or times out cancels the upstream task.

The SDK's client validates ``tools/call`` results as ``CallToolResult`` and has no tasks API, so these requests
go through the session's raw channel, as the SDK's own ``subscriptions/listen`` driver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import mcp_types as types
from mcp import ClientSession
from mcp.shared.dispatcher import CallOptions

from gateway.limits import UPSTREAM_TASK_CANCEL_SECONDS, UPSTREAM_TASK_TTL_MS

__all__ = ["call_as_task", "needs_task"]

log = logging.getLogger("gateway.upstreams.mcp")


def needs_task(execution: dict[str, Any] | None) -> bool:
    """Whether a tool with this ``execution`` can only be called as a task."""
    return bool(execution) and (execution or {}).get("taskSupport") == "required"


async def _request(session: ClientSession, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {"timeout": timeout}
    session._stamp(data, opts)  # the session's per-era envelope (protocol version header, _meta)
    return await session._dispatcher.send_raw_request(method, data.get("params"), opts)


async def call_as_task(session: ClientSession, tool: str, arguments: dict[str, Any],
                       timeout: float) -> types.CallToolResult:
    """Run ``tool`` as an upstream task and return its result (a server that answers at once is taken as it is)."""
    created = await _request(session, "tools/call",
                             {"name": tool, "arguments": arguments, "task": {"ttl": UPSTREAM_TASK_TTL_MS}}, timeout)
    task = created.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
        return types.CallToolResult.model_validate(created, by_name=False)
    task_id: str = task["taskId"]
    try:
        # tasks/result waits for the end of the task and answers what tools/call would have.
        result = await _request(session, "tasks/result", {"taskId": task_id}, timeout)
    except BaseException:
        # Cancelled or failed while the upstream works: the upstream task must not run on unobserved.
        await _cancel(session, task_id)
        raise
    result.pop("_meta", None)  # io.modelcontextprotocol/related-task: the upstream's id stays here
    return types.CallToolResult.model_validate(result, by_name=False)


async def _cancel(session: ClientSession, task_id: str) -> None:
    async def cancel() -> None:
        with contextlib.suppress(Exception):
            await _request(session, "tasks/cancel", {"taskId": task_id}, UPSTREAM_TASK_CANCEL_SECONDS)

    sent = asyncio.ensure_future(cancel())
    try:
        await asyncio.shield(sent)
    except asyncio.CancelledError:
        log.info("upstream task cancel sent in the background")
