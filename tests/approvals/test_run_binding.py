"""Retries of a held call without a call id, sent together, all belong to its one request.

A call without a call id is bound by (principal, run, tool, arguments) until a caller has been given
its outcome; the next identical call is then a new decision. Retries sent at once race the one that
runs: the run can end, and its caller be told, before a retry that came in meanwhile has looked its
request up. Such a retry still gets the one run's outcome, not a second request. The real
``ApprovalService`` on a real SQLite store; the order of events is set by the test.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.approvals.service import ApprovalService
from gateway.pipeline.approvals import HeldCall
from gateway.pipeline.request import CallRequest
from gateway.policy.call import Principal, ToolInfo
from gateway.policy.decision import ApprovalRequirement, Decision, Stage, Verdict
from gateway.upstreams.base import UpstreamTool
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.registry import ExposedTool

ARGS = {"service": "billing"}
AGENT = Principal("agent", ("bots",))
APPROVER = Principal("dave", ("managers",))
TOOL = ExposedTool("deploy", HttpUpstream("ops", "http://127.0.0.1:9", []), UpstreamTool("deploy"),
                   ToolInfo("deploy", "ops"), None)
DECISION = Decision(Verdict.APPROVE, Stage.REQUEST, dict(ARGS), dict(ARGS), "r1", message="Deploys need a human",
                    decided_by="deploys", approvals=[ApprovalRequirement(
                        "deploys", "Deploys need a human", ("group:managers",), 600.0, Verdict.REJECT, "page")])


def retry(run: str = "run-1", **fields: Any) -> HeldCall:
    """The call, sent again in ``run`` without a call id (the gateway made one up); not yet looked up."""
    return HeldCall(CallRequest("deploy", dict(ARGS), AGENT, run, call_id_given=False, wait_seconds=0, **fields),
                    TOOL, DECISION)


async def test_a_retry_that_came_in_before_the_outcome_was_given_gets_it(approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked = await service.hold(retry())
    assert asked.pending and asked.approval_id is not None
    await service.decide(asked.approval_id, APPROVER, True)

    sent_together = retry()  # came in now, with the retry below, before the run ended
    runs = await service.hold(retry())
    assert runs.approved and runs.approval_id == asked.approval_id
    await service.executed(asked.approval_id, {"content": [{"type": "text", "text": "deployed"}]})

    late = await service.hold(sent_together)  # looked up only after the runner was given the outcome
    assert (late.approved, late.approval_id, late.replay) == \
        (False, asked.approval_id, {"content": [{"type": "text", "text": "deployed"}]})

    again = await service.hold(retry())  # sent after the outcome: a new decision
    assert again.pending and again.approval_id != asked.approval_id
    other_run = await service.hold(retry("run-2", received_ts=time.time() - 60))  # another run never binds
    assert other_run.pending and other_run.approval_id not in (asked.approval_id, again.approval_id)


async def test_a_retry_that_came_in_before_a_denial_was_told_is_told_it_too(approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked = await service.hold(retry())
    assert asked.approval_id is not None
    sent_together = retry()
    await service.decide(asked.approval_id, APPROVER, False, "not today")
    told = await service.hold(retry())
    assert (told.approved, told.approval_id, told.pending) == (False, asked.approval_id, False)
    late = await service.hold(sent_together)
    assert (late.approved, late.approval_id, late.message) == (False, asked.approval_id, told.message)
    assert (await service.hold(retry())).approval_id != asked.approval_id
