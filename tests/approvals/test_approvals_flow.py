"""Approvals end to end: a held call, decided through the approver API, runs at most once.

The gateway runs under uvicorn in front of ``CountingUpstream`` (an MCP server in this process that
records every run); callers use the SDK's MCP client or REST, approvers the REST approver API.
"""

from __future__ import annotations

import asyncio

import pytest
from approval_support import (
    PAGE_URL,
    STEP_SECONDS,
    Progress,
    approve_rule,
    call_meta,
    finished,
    in_background,
    policy,
    text_of,
)

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

OPS_ONLY = policy(approve_rule("deploys-need-ops", approvers=["group:ops"]))




async def _held_by_rest(bench, gw, cid: str, service: str = "billing") -> str:
    """Ask for a deploy over REST without waiting; the approval id from the 202."""
    response = await bench.invoke(gw, "ops_deploy", {"service": service}, call_id=cid)
    assert response.status_code == 202, response.text
    approval_id: str = response.json()["approval_id"]
    return approval_id


# --- a held MCP call -------------------------------------------------------------------------------


async def test_held_mcp_call_approved_through_the_api_runs_once_and_returns_its_result(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid = call_id()
    progress = Progress()
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_deploy", {"service": "billing"}, meta=call_meta(cid), progress_callback=progress)) as call:
        pending = await bench.wait_pending(gw, cid)
        approval_id = pending["id"]
        assert (pending["tool"], pending["final_args"], pending["principal"]["id"]) == (
            "ops_deploy", {"service": "billing"}, "alice")
        message = await progress.first()
        assert f"Waiting for approval {approval_id}" in message
        assert f"{PAGE_URL}/{approval_id}" in message
        assert not call.done() and bench.upstream.ran("deploy") == 0  # held, not run
        page = await bench.rest(gw, "bob").get(f"/approvals/{approval_id}")  # the link's path is served
        assert (page.status_code, page.headers["content-type"]) == (200, "text/html; charset=utf-8")

        decided = await bench.decide(gw, "bob", approval_id, comment="go ahead")
        assert decided.status_code == 200, decided.text
        assert decided.json()["state"] == "approved"
        result = await finished(call)

    assert result.is_error is False
    assert result.structured_content == {"tool": "deploy", "args": {"service": "billing"}, "run": 1}
    assert text_of(result) == "deploy done (run 1)"
    assert result.meta["gateway/approval_id"] == approval_id
    assert bench.upstream.ran("deploy", service="billing") == 1
    stored = await bench.approval(gw, approval_id)
    assert stored["state"] == "executed"
    assert [(v["approver"], v["approve"], v["comment"]) for v in stored["votes"]] == [("bob", True, "go ahead")]


async def test_held_mcp_call_denied_through_the_api_is_an_error_with_the_comment(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid = call_id()
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_deploy", {"service": "billing"}, meta=call_meta(cid))) as call:
        approval_id = (await bench.wait_pending(gw, cid))["id"]
        decided = await bench.decide(gw, "bob", approval_id, approve=False, comment="not during the freeze")
        assert decided.status_code == 200, decided.text
        result = await finished(call)

    assert result.is_error is True
    assert text_of(result) == "Denied by an approver: not during the freeze"
    assert result.meta["gateway/approval_id"] == approval_id
    assert bench.upstream.ran("deploy") == 0
    assert (await bench.approval(gw, approval_id))["state"] == "denied"


async def test_nobody_deciding_in_time_with_on_timeout_reject_refuses_the_call(bench, call_id):
    gw = await bench.start(policy(approve_rule("deploys-need-ops", approvers=["group:ops"], timeout=1)))
    cid = call_id()
    async with bench.mcp(gw, "alice") as client:
        result = await asyncio.wait_for(client.call_tool("ops_deploy", {"service": "billing"}, meta=call_meta(cid)),
                                        10)

    assert result.is_error is True
    assert text_of(result) == "Nobody approved this call in time, so it was not run."
    assert bench.upstream.ran("deploy") == 0
    approval = await bench.approval(gw, result.meta["gateway/approval_id"])
    assert approval["state"] == "expired"
    late = await bench.decide(gw, "bob", approval["id"])  # too late to approve
    assert late.status_code == 409
    assert bench.upstream.ran("deploy") == 0


async def test_nobody_deciding_in_time_with_on_timeout_allow_runs_the_call(bench, call_id):
    gw = await bench.start(policy(approve_rule("deploys-need-ops", approvers=["group:ops"], timeout=1,
                                               on_timeout="allow")))
    cid = call_id()
    async with bench.mcp(gw, "alice") as client:
        result = await asyncio.wait_for(client.call_tool("ops_deploy", {"service": "billing"}, meta=call_meta(cid)),
                                        10)

    assert result.is_error is False
    assert result.structured_content == {"tool": "deploy", "args": {"service": "billing"}, "run": 1}
    assert bench.upstream.ran("deploy", service="billing") == 1
    approval = await bench.approval(gw, result.meta["gateway/approval_id"])
    assert approval["state"] == "executed"
    assert [(v["approver"], v["approve"]) for v in approval["votes"]] == [("timeout", True)]


async def test_two_callers_waiting_on_the_same_call_share_one_run(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid = call_id()
    async with bench.mcp(gw, "alice") as first, bench.mcp(gw, "alice") as second, \
            in_background(first.call_tool("ops_deploy", {"service": "api"}, meta=call_meta(cid))) as one, \
            in_background(second.call_tool("ops_deploy", {"service": "api"}, meta=call_meta(cid))) as two:
        approval_id = (await bench.wait_pending(gw, cid))["id"]
        await asyncio.sleep(0.2)  # let the second caller reach the same request before it is decided
        assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
        results = [await finished(one), await finished(two)]

    assert bench.upstream.ran("deploy", service="api") == 1
    assert [r.structured_content for r in results] == [{"tool": "deploy", "args": {"service": "api"}, "run": 1}] * 2
    assert {r.meta["gateway/approval_id"] for r in results} == {approval_id}


async def test_a_denied_rest_call_stays_denied_when_retried(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid = call_id()
    approval_id = await _held_by_rest(bench, gw, cid)
    assert (await bench.decide(gw, "bob", approval_id, approve=False, comment="use the canary")).status_code == 200

    for _ in range(2):
        retry = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
        assert retry.status_code == 200, retry.text
        assert (retry.json()["is_error"], retry.json()["content"]) == (
            True, [{"type": "text", "text": "Denied by an approver: use the canary"}])
    assert bench.upstream.ran("deploy") == 0


# --- who may decide --------------------------------------------------------------------------------


async def test_the_approver_api_refuses_what_it_must(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    approval_id = await _held_by_rest(bench, gw, call_id())

    def code(response) -> tuple[int, str]:
        return response.status_code, response.json()["error"]["code"]

    assert code(await bench.decide(gw, "alice", approval_id)) == (403, "approval-forbidden")  # her own call
    assert code(await bench.decide(gw, "frank", approval_id)) == (403, "not-an-approver")  # key without approver
    assert code(await bench.decide(gw, "erin", approval_id)) == (403, "approval-forbidden")  # not in group:ops
    assert code(await bench.decide(gw, "bob", "0123456789abcdef")) == (404, "approval-not-found")
    assert (await bench.rest(gw, "frank").get("/v1/approvals")).status_code == 403
    approval = await bench.approval(gw, approval_id)
    assert (approval["state"], approval["votes"]) == ("pending", [])  # none of that counted

    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
    assert code(await bench.decide(gw, "dave", approval_id)) == (409, "approval-conflict")  # decided already
    assert code(await bench.decide(gw, "bob", approval_id, approve=False)) == (409, "approval-conflict")
    approval = await bench.approval(gw, approval_id)
    assert approval["state"] == "approved"
    assert [v["approver"] for v in approval["votes"]] == ["bob"]
    assert bench.upstream.ran("deploy") == 0  # approval alone runs nothing until the caller comes back


TWO_GROUPS = policy(
    approve_rule("deploys-need-ops", approvers=["group:ops"], message="Ops must agree."),
    approve_rule("deploys-need-security", approvers=["group:security"], message="Security must agree."),
)


async def test_two_rules_need_an_approver_from_each_group(bench, call_id):
    gw = await bench.start(TWO_GROUPS)
    cid = call_id()
    approval_id = await _held_by_rest(bench, gw, cid)
    approval = await bench.approval(gw, approval_id)
    assert [(r["rule"], r["approvers"], r["message"]) for r in approval["requirements"]] == [
        ("approvals/deploys-need-ops", ["group:ops"], "Ops must agree."),
        ("approvals/deploys-need-security", ["group:security"], "Security must agree.")]

    first = await bench.decide(gw, "bob", approval_id)
    assert first.status_code == 200, first.text
    assert first.json()["state"] == "pending"
    assert [r["satisfied_by"] for r in first.json()["requirements"]] == ["bob", None]
    again = await bench.decide(gw, "bob", approval_id)  # ops has spoken; bob cannot satisfy security
    assert again.status_code == 403
    still = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert still.status_code == 202 and bench.upstream.ran("deploy") == 0

    second = await bench.decide(gw, "carol", approval_id)
    assert second.status_code == 200, second.text
    assert second.json()["state"] == "approved"
    assert [r["satisfied_by"] for r in second.json()["requirements"]] == ["bob", "carol"]
    done = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert done.status_code == 200 and done.json()["is_error"] is False
    assert bench.upstream.ran("deploy", service="billing") == 1


async def test_one_approver_in_both_groups_satisfies_both_rules(bench, call_id):
    gw = await bench.start(TWO_GROUPS)
    approval_id = await _held_by_rest(bench, gw, call_id())

    decided = await bench.decide(gw, "dave", approval_id)

    assert decided.status_code == 200, decided.text
    assert decided.json()["state"] == "approved"
    assert [r["satisfied_by"] for r in decided.json()["requirements"]] == ["dave", "dave"]
    [vote] = decided.json()["votes"]
    assert vote["rules"] == ["approvals/deploys-need-ops", "approvals/deploys-need-security"]


async def test_two_callers_waiting_on_a_two_rule_call_both_get_the_result_promptly(bench, call_id):
    gw = await bench.start(TWO_GROUPS)
    cid = call_id()
    waiting = [Progress(), Progress()]
    async with bench.mcp(gw, "alice") as first, bench.mcp(gw, "alice") as second, \
            in_background(first.call_tool("ops_deploy", {"service": "api"}, meta=call_meta(cid),
                                          progress_callback=waiting[0])) as one, \
            in_background(second.call_tool("ops_deploy", {"service": "api"}, meta=call_meta(cid),
                                           progress_callback=waiting[1])) as two:
        approval_id = (await bench.wait_pending(gw, cid))["id"]
        for progress in waiting:  # each caller is told once it waits on the request
            assert approval_id in await progress.first()
        assert (await bench.decide(gw, "bob", approval_id)).json()["state"] == "pending"  # wakes both; not done
        await asyncio.sleep(0.1)
        assert (await bench.decide(gw, "carol", approval_id)).json()["state"] == "approved"
        done, _ = await asyncio.wait({one, two}, timeout=STEP_SECONDS)  # both woken by the decision
        results = [t.result() for t in done]

    assert bench.upstream.ran("deploy", service="api") == 1
    assert [r.structured_content["run"] for r in results] == [1, 1]


# --- REST: 202 while pending, then the same call id --------------------------------------------------


async def test_rest_wait_answers_202_then_the_same_call_id_gets_the_one_result(bench, call_id):
    gw = await bench.start(OPS_ONLY)
    cid = call_id()
    started = asyncio.get_running_loop().time()
    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid, wait="1s")
    waited = asyncio.get_running_loop().time() - started

    assert held.status_code == 202, held.text
    body = held.json()
    approval_id = body["approval_id"]
    assert (body["call_id"], body["decision"], body["status_url"]) == (cid, "pending", f"/v1/approvals/{approval_id}")
    assert f"{PAGE_URL}/{approval_id}" in body["message"]
    assert waited >= 0.9  # it did hold the request for the wait
    status = await bench.rest(gw, "alice").get(body["status_url"])  # the caller may follow the status url
    assert (status.status_code, status.json()["state"]) == (200, "pending")
    assert bench.upstream.ran("deploy") == 0

    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
    done = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert done.status_code == 200, done.text
    result = done.json()
    assert (result["call_id"], result["is_error"]) == (cid, False)
    assert result["structured"] == {"tool": "deploy", "args": {"service": "billing"}, "run": 1}
    assert result["meta"]["gateway/approval_id"] == approval_id

    again = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert (again.status_code, again.json()) == (200, result)
    assert bench.upstream.ran("deploy") == 1

    other = await bench.invoke(gw, "ops_deploy", {"service": "payroll"}, call_id=cid)  # same id, new arguments
    assert other.status_code == 202, other.text
    assert other.json()["approval_id"] != approval_id
    assert "structured" not in other.json()
    assert bench.upstream.ran("deploy") == 1
    assert (await bench.approval(gw, other.json()["approval_id"]))["final_args"] == {"service": "payroll"}


BUDGET_OF_TWO = policy(
    "  - id: two-calls-per-session\n    when: session.calls >= 2\n    action: reject\n    message: Budget used.\n",
    approve_rule("deploys-need-ops", approvers=["group:ops"]),
)


async def test_retrying_a_pending_call_does_not_use_up_the_session_budget(bench, call_id):
    gw = await bench.start(BUDGET_OF_TWO)
    cid = call_id()
    answers = [await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 202], answers[-1].text
    assert (await bench.decide(gw, "bob", answers[0].json()["approval_id"])).status_code == 200

    done = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)

    assert (done.status_code, done.json()["is_error"]) == (200, False), done.text
    assert bench.upstream.ran("deploy") == 1


async def test_rest_wait_accepts_every_duration_form(bench, call_id):
    gw = await bench.start(OPS_ONLY)

    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=call_id(), wait="0m1s")

    assert held.status_code == 202, held.text
