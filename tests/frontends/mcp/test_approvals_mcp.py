"""Approvals seen from MCP clients: elicitation and the fallback to the page when a client cannot ask;
a tool that vanishes before the approval; a caller that goes away while its approved call runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import mcp_types as types
import pytest
from approval_support import (
    STEP_SECONDS,
    approve_rule,
    call_meta,
    finished,
    in_background,
    policy,
    text_of,
)

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

# The requester (self) may answer through their client; ops on the page.
ASK_THE_USER = policy(approve_rule("confirm-deploys", approvers=["self", "group:ops"], via="elicitation",
                                  message="Really deploy?"))


class Answers:
    """An elicitation callback that gives a fixed answer and keeps what it was asked."""

    def __init__(self, result: types.ElicitResult) -> None:
        self.result = result
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        return self.result


# --- elicitation -----------------------------------------------------------------------------------


async def test_an_end_user_who_accepts_the_elicitation_lets_the_call_run(bench, call_id):
    gw = await bench.start(ASK_THE_USER)
    answers = Answers(types.ElicitResult(action="accept", content={"approve": True}))
    cid = call_id()
    async with bench.mcp(gw, "alice", elicit=answers) as client:
        result = await client.call_tool("ops_deploy", {"service": "search"}, meta=call_meta(cid),
                                        read_timeout_seconds=STEP_SECONDS)

    [asked] = answers.asked
    assert "Really deploy?" in asked.message
    assert "ops_deploy" in asked.message and "search" in asked.message
    assert result.is_error is False
    assert result.structured_content == {"tool": "deploy", "args": {"service": "search"}, "run": 1}
    assert bench.upstream.ran("deploy", service="search") == 1
    approval = await bench.approval(gw, result.meta["gateway/approval_id"])
    assert approval["state"] == "executed"
    assert [(v["approver"], v["approve"]) for v in approval["votes"]] == [("end-user:alice", True)]


@pytest.mark.parametrize("answer", [types.ElicitResult(action="decline"),
                                    types.ElicitResult(action="accept", content={"approve": False})],
                         ids=["decline", "accept-with-no"])
async def test_an_end_user_who_declines_the_elicitation_denies_the_call(bench, call_id, answer):
    gw = await bench.start(ASK_THE_USER)
    answers = Answers(answer)
    async with bench.mcp(gw, "alice", elicit=answers) as client:
        result = await client.call_tool("ops_deploy", {"service": "search"}, meta=call_meta(call_id()),
                                        read_timeout_seconds=STEP_SECONDS)

    assert len(answers.asked) == 1
    assert result.is_error is True
    assert text_of(result) == "The user declined this call."
    assert bench.upstream.ran("deploy") == 0
    assert (await bench.approval(gw, result.meta["gateway/approval_id"]))["state"] == "denied"


async def test_a_client_without_elicitation_is_held_until_an_approver_decides(bench, call_id):
    gw = await bench.start(ASK_THE_USER)
    cid = call_id()
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_deploy", {"service": "search"}, meta=call_meta(cid))) as call:
        pending = await bench.wait_pending(gw, cid)
        assert [r["via"] for r in pending["requirements"]] == ["elicitation"]
        assert not call.done() and bench.upstream.ran("deploy") == 0
        assert (await bench.decide(gw, "bob", pending["id"])).status_code == 200
        result = await finished(call)

    assert result.is_error is False
    assert result.structured_content == {"tool": "deploy", "args": {"service": "search"}, "run": 1}
    assert bench.upstream.ran("deploy") == 1


class NeverAnswers:
    """An elicitation callback for a user who walked away: it waits until the test ends."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.released = asyncio.Event()

    async def __call__(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.set()
        await self.released.wait()
        return types.ElicitResult(action="cancel")


async def test_an_approver_can_decide_while_the_end_user_has_not_answered_the_elicitation(bench, call_id):
    gw = await bench.start(ASK_THE_USER)
    user = NeverAnswers()
    cid = call_id()
    async with bench.mcp(gw, "alice", elicit=user) as client, in_background(client.call_tool(
            "ops_deploy", {"service": "search"}, meta=call_meta(cid))) as call:
        await asyncio.wait_for(user.asked.wait(), STEP_SECONDS)
        pending = await bench.wait_pending(gw, cid)
        assert (await bench.decide(gw, "bob", pending["id"])).status_code == 200
        done, _ = await asyncio.wait({call}, timeout=STEP_SECONDS)  # the user never answers: only the vote ends it
        user.released.set()

    assert done, "the approved call still waits for the end user's answer"
    result = call.result()
    assert (result.is_error, result.structured_content["run"]) == (False, 1)
    assert bench.upstream.ran("deploy") == 1


async def test_an_unanswered_elicitation_does_not_outlive_the_approval_timeout(bench, call_id):
    gw = await bench.start(policy(approve_rule("confirm-deploys", approvers=["self"], via="elicitation", timeout=1)))
    user = NeverAnswers()
    async with bench.mcp(gw, "alice", elicit=user) as client, in_background(client.call_tool(
            "ops_deploy", {"service": "search"}, meta=call_meta(call_id()))) as call:
        done, _ = await asyncio.wait({call}, timeout=STEP_SECONDS)  # the user never answers: only the timeout ends it
        user.released.set()

    assert done, "the call outlived its approval's 1 s timeout"
    result = call.result()
    assert result.is_error is True
    assert text_of(result) == "Nobody approved this call in time, so it was not run."
    assert bench.upstream.ran("deploy") == 0


# --- the tool is gone by the time it is approved ---------------------------------------------------

GONE = "The tool ops_vanishing is no longer available, so the approved call was not run."
VANISHING = policy(approve_rule("hold-vanishing", "ops_vanishing", approvers=["group:ops"]))


async def _gone_from_the_gateway(bench, gw) -> None:
    await bench.upstream.remove_tool("vanishing")
    for _ in range(int(STEP_SECONDS / 0.02)):
        if gw.gateway.registry.get("ops_vanishing") is None:
            return
        await asyncio.sleep(0.02)
    pytest.fail("the gateway still exposes ops_vanishing after the upstream's list_changed")


async def test_a_held_mcp_call_whose_tool_vanished_says_the_tool_is_no_longer_available(bench, call_id):
    gw = await bench.start(VANISHING)
    cid = call_id()
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_vanishing", {"note": "n-1"}, meta=call_meta(cid))) as call:
        approval_id = (await bench.wait_pending(gw, cid))["id"]
        await _gone_from_the_gateway(bench, gw)
        assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
        result = await finished(call)

    assert result.is_error is True
    assert text_of(result) == GONE
    assert result.meta["gateway/decision"] == "tool_unavailable"
    assert "failed" not in text_of(result)
    assert bench.upstream.ran("vanishing") == 0


async def test_a_rest_retry_of_an_approved_call_whose_tool_vanished_says_the_tool_is_no_longer_available(
        bench, call_id):
    gw = await bench.start(VANISHING)
    cid = call_id()
    held = await bench.invoke(gw, "ops_vanishing", {"note": "n-2"}, call_id=cid)
    assert held.status_code == 202, held.text
    await _gone_from_the_gateway(bench, gw)
    assert (await bench.decide(gw, "bob", held.json()["approval_id"])).status_code == 200

    retry = await bench.invoke(gw, "ops_vanishing", {"note": "n-2"}, call_id=cid)

    assert bench.upstream.ran("vanishing") == 0
    assert retry.status_code == 200, retry.text
    assert (retry.json()["decision"], retry.json()["content"]) == ("tool_unavailable", [{"type": "text",
                                                                                         "text": GONE}])


# --- the caller goes away while the approved call runs ---------------------------------------------


async def test_an_approved_run_whose_caller_went_away_still_gives_the_retry_a_final_answer(bench, call_id):
    gw = await bench.start(policy(approve_rule("slow-needs-ops", "ops_slow", approvers=["group:ops"])))
    cid = call_id()
    held = await bench.invoke(gw, "ops_slow", {"seconds": "0.5"}, call_id=cid)
    assert held.status_code == 202, held.text
    approval_id = held.json()["approval_id"]
    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
    async with bench.mcp(gw, "alice") as client:
        async with in_background(client.call_tool("ops_slow", {"seconds": "0.5"}, meta=call_meta(cid))):
            for _ in range(int(STEP_SECONDS / 0.02)):
                if bench.upstream.ran("slow"):
                    break
                await asyncio.sleep(0.02)
        # leaving the block cancelled the call while the tool ran: the client tells the gateway it gave up
    deadline = time.monotonic() + STEP_SECONDS  # the run itself takes 0.5 s
    while (state := (await bench.approval(gw, approval_id))["state"]) == "executing" and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    retry = await bench.invoke(gw, "ops_slow", {"seconds": "0.5"}, call_id=cid)

    assert bench.upstream.ran("slow") == 1
    assert state == "executed"
    assert retry.status_code == 200, retry.text  # a final answer, not "waiting for approval"
