"""Elicitation approvals for 2026-07-28 clients through input-required results (docs/gateway.md "Approvals").

The client declared elicitation: a held call whose rule says ``via: elicitation`` is answered with an
``InputRequiredResult`` holding the question; the SDK's ``Client`` asks its user (the elicitation callback) and
sends the call again with the answer, which decides the approval. Clients that declared nothing are not sent one.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from approval_support import STEP_SECONDS, approve_rule, policy, text_of
from tasks_support import connect

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

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


async def test_modern_an_end_user_who_accepts_through_input_required_lets_the_call_run(bench: Any) -> None:
    gw = await bench.start(ASK_THE_USER)
    answers = Answers(types.ElicitResult(action="accept", content={"approve": True}))
    async with connect(gw, "2026-07-28", elicitation_callback=answers) as client:
        result = await client.call_tool("ops_deploy", {"service": "search"}, read_timeout_seconds=STEP_SECONDS)
    [asked] = answers.asked
    assert "Really deploy?" in asked.message and "ops_deploy" in asked.message and "search" in asked.message
    assert result.is_error is False, text_of(result)
    assert result.structured_content == {"tool": "deploy", "args": {"service": "search"}, "run": 1}
    assert bench.upstream.ran("deploy") == 1
    approval = await bench.approval(gw, result.meta["gateway/approval_id"])
    assert approval["state"] == "executed"
    assert [(v["approver"], v["approve"]) for v in approval["votes"]] == [("end-user:alice", True)]


@pytest.mark.parametrize("answer", [types.ElicitResult(action="decline"),
                                    types.ElicitResult(action="accept", content={"approve": False})],
                         ids=["decline", "accept-with-no"])
async def test_modern_an_end_user_who_declines_denies_the_call(bench: Any, answer: types.ElicitResult) -> None:
    gw = await bench.start(ASK_THE_USER)
    answers = Answers(answer)
    async with connect(gw, "2026-07-28", elicitation_callback=answers) as client:
        result = await client.call_tool("ops_deploy", {"service": "search"}, read_timeout_seconds=STEP_SECONDS)
    assert len(answers.asked) == 1
    assert result.is_error is True and text_of(result) == "The user declined this call."
    assert bench.upstream.ran("deploy") == 0


async def test_modern_an_answer_to_another_question_is_not_taken(bench: Any) -> None:
    gw = await bench.start(ASK_THE_USER)
    forged = {"gateway-approval-" + "0" * 32: types.ElicitResult(action="accept", content={"approve": True})}
    async with connect(gw, "2026-07-28", elicitation_callback=Answers(types.ElicitResult(action="decline"))) as c:
        first = await c.session.call_tool("ops_deploy", {"service": "forged"}, input_responses=forged,
                                          allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult) and first.input_requests
    [key] = first.input_requests
    assert key not in forged and bench.upstream.ran("deploy") == 0


async def test_modern_a_client_without_elicitation_gets_no_input_required(bench: Any) -> None:
    gw = await bench.start(ASK_THE_USER)
    async with connect(gw, "2026-07-28") as client:
        result = await client.session.call_tool("ops_deploy", {"service": "plain"})  # would raise on input_required
    assert isinstance(result, types.CallToolResult) and result.meta is not None
    assert result.meta["gateway/pending"] is True
