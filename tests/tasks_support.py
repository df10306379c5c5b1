"""Helpers for the MCP tasks tests (test_tasks*.py): raw requests and a task-aware 2026-07-28 client.

The SDK's client has no tasks API: a task-augmented tools/call (2025-11-25) and the tasks/* methods go through
its session's raw channel (as the SDK's own subscriptions/listen driver does), and the 2026-07-28 tasks
extension is a ``ClientExtension`` claiming ``resultType: "task"``, the SDK's way to add a result shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
import mcp_types as types
import pytest
from approval_support import auth_header
from mcp import Client, ClientSession, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions

EXTENSION = "io.modelcontextprotocol/tasks"
NOT_FOUND = "Failed to retrieve task: Task not found"


async def raw(session: ClientSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request whose result the SDK client has no type for (tasks/*, a task-augmented tools/call)."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {"timeout": 30}
    session._stamp(data, opts)
    return await session._dispatcher.send_raw_request(method, data["params"], opts)


async def refused(session: ClientSession, method: str, params: dict[str, Any]) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await raw(session, method, params)
    return caught.value


class TaskHandle(types.Result):
    """A 2026-07-28 ``CreateTaskResult``."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TasksClient(ClientExtension):
    """A task-aware 2026-07-28 client: declares the extension and finishes a task by polling tasks/get."""

    identifier = EXTENSION

    def __init__(self) -> None:
        self.created: list[str] = []
        self.seen: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self._resolve)]

    async def _resolve(self, handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(handle.task_id)
        while True:
            got = await raw(ctx.session, "tasks/get", {"taskId": handle.task_id})
            self.seen.append(got["status"])
            if got["status"] == "completed":
                return types.CallToolResult.model_validate(got["result"])
            assert got["status"] == "working", got
            await asyncio.sleep(got["pollIntervalMs"] / 1000)


@asynccontextmanager
async def connect(gw: Any, mode: str, **options: Any) -> AsyncIterator[Client]:
    """An SDK client as alice of the approvals bench (``options`` go to ``mcp.Client``)."""
    http = httpx2.AsyncClient(headers=auth_header("alice"), timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(gw.mcp_url, http_client=http), mode=mode, **options) as client:
        yield client
