"""An approval is for one upstream's tool, under the requirements it was asked with (issue 18, items 3, 9, 20).

The real ``ApprovalService`` on a real SQLite store, the calls built as the frontends build them:
the model proxy hands in an agent-run tool (upstream ``client``), the MCP and REST frontends the
registry's tool of a named upstream; a call without a call id in an implicit run (the client named no
run) may come back in another implicit run, as clients that open an MCP session per call do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.approvals.service import ApprovalService
from gateway.core.errors import ApprovalForbidden
from gateway.models.dialects.chat_tools import client_tools
from gateway.pipeline.approvals import HeldCall
from gateway.pipeline.request import CallRequest
from gateway.policy.call import Principal, ToolInfo
from gateway.policy.decision import ApprovalRequirement, Decision, Stage, Verdict
from gateway.upstreams.base import UpstreamTool
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.registry import ExposedTool

ARGS = {"to": "cfo@example.com", "body": "wire it"}
AGENT = Principal("agent", ("bots",))
DEVELOPER = Principal("dev", ("developers",))
ADMIN = Principal("root", ("admins",))
AGENT_TOOL = client_tools([{"type": "function", "function": {"name": "send_email"}}])
GATEWAY_TOOL = ExposedTool("send_email", HttpUpstream("mail", "http://127.0.0.1:9", []), UpstreamTool("send_email"),
                           ToolInfo("send_email", "mail"), None)


def _decision(rule: str, *approvers: str, via: str = "page") -> Decision:
    return Decision(Verdict.APPROVE, Stage.REQUEST, dict(ARGS), dict(ARGS), "r1", message="Needs a human",
                    decided_by=rule, approvals=[ApprovalRequirement(rule, "Needs a human", approvers, 600.0,
                                                                    Verdict.REJECT, via)])


def _call(tool: ExposedTool, decision: Decision, run: str = "run-1", wait: float = 0, **fields: Any) -> HeldCall:
    """The call as a frontend hands it in, without a call id (the gateway made one up)."""
    return HeldCall(CallRequest("send_email", dict(ARGS), AGENT, run, call_id_given=False, wait_seconds=wait,
                                **fields), tool, decision)


async def test_an_agent_tools_approval_never_releases_the_gateway_tool_of_the_same_name(approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    assert isinstance(AGENT_TOOL, dict)
    agent_call = _call(AGENT_TOOL["send_email"], _decision("model/agent-mail", "group:developers"))
    asked = await service.hold(agent_call)
    assert asked.pending and asked.approval_id is not None
    await service.decide(asked.approval_id, DEVELOPER, True)

    # The same principal, run, tool name and arguments, but the gateway's own tool, whose rule needs admins.
    attack = await service.hold(_call(GATEWAY_TOOL, _decision("mail/gateway-mail", "group:admins")))

    assert not attack.approved and attack.pending and attack.approval_id != asked.approval_id
    assert attack.approval_id is not None
    held = await service.get(attack.approval_id)
    assert held is not None and held.upstream == "mail" and held.to_dict()["upstream"] == "mail"
    assert [(r.rule, r.approvers) for r in held.requirements] == [("mail/gateway-mail", ["group:admins"])]
    with pytest.raises(ApprovalForbidden):
        await service.decide(attack.approval_id, DEVELOPER, True)
    agent_approval = await service.get(asked.approval_id)
    assert agent_approval is not None and agent_approval.upstream == "client"
    assert (await service.hold(agent_call)).approved  # the agent's own call is still released, once


async def test_a_retry_needing_other_approvers_is_a_new_request_and_the_old_one_is_set_aside(
        approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked = await service.hold(_call(GATEWAY_TOOL, _decision("mail/mail", "group:developers")))
    assert asked.approval_id is not None
    await service.decide(asked.approval_id, DEVELOPER, True)

    stricter = await service.hold(_call(GATEWAY_TOOL, _decision("mail/mail", "group:admins")))  # after a reload

    assert not stricter.approved and stricter.pending and stricter.approval_id != asked.approval_id
    old = await service.get(asked.approval_id)
    assert old is not None and old.retired and old.execution()["state"] == "superseded"
    assert stricter.approval_id is not None
    await service.decide(stricter.approval_id, ADMIN, True)
    # A rule made weaker again is covered by the stricter approval: who decided it may still decide it.
    weaker = _decision("mail/mail", "group:admins", "group:developers")
    assert (await service.hold(_call(GATEWAY_TOOL, weaker))).approved


async def test_the_requesters_client_cannot_answer_for_other_approvers(approval_desk: Any) -> None:
    """A requirement whose approvers are others (as a request stored before ``self`` existed has it) is not
    asked through the requester's client, and its accept could not satisfy it."""
    service: ApprovalService = approval_desk.service
    asked: list[str] = []

    async def accepts(question: str) -> bool:
        asked.append(question)
        return True

    others = await service.hold(_call(GATEWAY_TOOL, _decision("mail/mail", "group:admins", via="elicitation"),
                                      wait=0.3, elicit=accepts))
    assert others.pending and not others.approved and asked == []

    own = await service.hold(_call(GATEWAY_TOOL, _decision("mail/own", "self", "group:admins", via="elicitation"),
                                   run="run-2", wait=30, elicit=accepts))
    assert own.approved and own.approval_id is not None and len(asked) == 1
    decided = await service.get(own.approval_id)
    assert decided is not None and decided.requirements[0].satisfied_by == "end-user:agent"


async def test_a_retry_in_another_implicit_run_finds_its_approval_and_runs_once(approval_desk: Any) -> None:
    """A client that opens a new MCP session per call comes back in another implicit run: the retry of the
    approved call is found by (principal, upstream, tool, arguments) and runs once."""
    service: ApprovalService = approval_desk.service
    decision = _decision("mail/mail", "group:developers")
    asked = await service.hold(_call(GATEWAY_TOOL, decision, "implicit-1", run_client="langchain/1"))
    assert asked.approval_id is not None
    await service.decide(asked.approval_id, DEVELOPER, True)

    retries = [asyncio.create_task(service.hold(_call(GATEWAY_TOOL, decision, f"implicit-{n}",
                                                      run_client="langchain/1"))) for n in (2, 3, 4)]
    done, waiting = await asyncio.wait(retries, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    [runner] = done  # the one that claimed it; the others wait for its outcome
    assert runner.result().approved and runner.result().approval_id == asked.approval_id
    sent = {"content": [{"type": "text", "text": "sent"}]}
    await service.executed(asked.approval_id, sent)
    others = await asyncio.wait_for(asyncio.gather(*waiting), 10)
    assert [(r.approved, r.approval_id, r.replay) for r in others] == [(False, asked.approval_id, sent)] * 2
    stored = await service.get(asked.approval_id)
    assert stored is not None and stored.to_dict()["bound_by"] == "principal"
    # A named run keeps its own requests: another run's approval never releases it.
    named = await service.hold(_call(GATEWAY_TOOL, decision, "named-run"))
    assert named.pending and named.approval_id != asked.approval_id


async def test_a_gone_gateway_tool_never_uses_up_an_agent_tools_approval(approval_desk: Any) -> None:
    """A call naming the model's call id for a tool the registry no longer has must not spend the agent's approval."""
    service: ApprovalService = approval_desk.service
    assert isinstance(AGENT_TOOL, dict)
    agent_call = _call(AGENT_TOOL["send_email"], _decision("model/agent-mail", "group:developers"))
    asked = await service.hold(agent_call)
    assert asked.approval_id is not None
    await service.decide(asked.approval_id, DEVELOPER, True)
    model_call_id = agent_call.request.call_id

    assert await service.orphaned(AGENT.id, model_call_id, "send_email") is None
    kept = await service.get(asked.approval_id)
    assert kept is not None and kept.state.value == "approved"
    assert (await service.hold(agent_call)).approved
