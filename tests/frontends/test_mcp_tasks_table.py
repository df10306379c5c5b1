"""The gateway's MCP task table: bounded per principal, bound to the principal, forgotten after the TTL."""

from __future__ import annotations

import time

import mcp_types as types
import pytest
from mcp import MCPError

from gateway.frontends.mcp.tasks import NOT_FOUND, TaskTable, listed_execution


async def test_a_principal_holds_a_bounded_number_of_tasks() -> None:
    table = TaskTable(max_per_principal=2)
    table.create("alice", "t", 1000)
    table.create("alice", "t", 1000)
    with pytest.raises(MCPError) as refused:
        table.create("alice", "t", 1000)
    assert refused.value.error.code == types.INVALID_REQUEST and "at most 2" in str(refused.value)
    table.create("bob", "t", 1000)  # another principal is not affected


async def test_another_principals_task_is_answered_like_an_unknown_one() -> None:
    table = TaskTable()
    task = table.create("alice", "t", 1000)
    assert table.find("alice", task.id) is task
    for who, task_id in (("bob", task.id), ("alice", "no-such-task"), ("bob", "no-such-task")):
        with pytest.raises(MCPError) as refused:
            table.find(who, task_id)
        assert (refused.value.error.code, str(refused.value)) == (types.INVALID_PARAMS, NOT_FOUND)
    assert table.of("bob") == [] and table.of("alice") == [task]
    assert len({table.create("alice", "t", 1000).id for _ in range(50)}) == 50
    assert len(task.id) == 32  # 192 random bits


async def test_an_ended_task_is_forgotten_after_its_ttl_a_running_one_is_kept() -> None:
    table = TaskTable()
    ended, running = table.create("alice", "t", 1000), table.create("alice", "t", 1000)
    ended.finish("completed", result={"content": [], "isError": False})
    ended.created = running.created = time.time() - 2
    assert table.of("alice") == [running]
    running.finish("cancelled")
    running.finish("completed", result={})  # the first end wins: a cancelled task stays cancelled
    assert running.status == "cancelled" and running.result is None


def test_a_task_only_tool_is_listed_optional_and_every_tool_to_a_task_client() -> None:
    assert listed_execution({"taskSupport": "required"}, False) == {"taskSupport": "optional"}
    assert listed_execution(None, False) is None
    assert listed_execution({"taskSupport": "forbidden"}, False) == {"taskSupport": "forbidden"}
    assert listed_execution(None, True) == {"taskSupport": "optional"}
