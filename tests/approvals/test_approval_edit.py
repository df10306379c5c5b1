"""An approver edits a held call's arguments before approving it (issue 24), on a real gateway on loopback.

The edited call is decided again by the request-stage policies for the agent's own principal and run: an edit
they refuse is refused (422, naming the rule) and the request stays pending; one they let go on runs with the
edited (then rewritten) arguments, exactly once, and the agent reads a note saying so. The approval record and
the decision log hold the arguments as asked, as edited and as run, and who edited them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from approval_support import STEP_SECONDS, call_meta, finished, in_background, policy, text_of, transfer_tool

from gateway.approvals.messages import EDIT_NOT_RELEASED
from gateway.pipeline.edits import EDITED, EDITED_ARGS

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

TRANSFER = "ops_transfer"
ASKED = {"to": "acme", "amount": 90}  # what the agent asks: held for ops, under the cap

# Every transfer gets a memo naming its payee (a rewrite, so the final arguments differ from the ones asked);
# transfers over 10 need ops; transfers over 100 are refused outright.
MEMO = ("  - id: memo-names-the-payee\n    tools: [ops_transfer]\n    action: rewrite\n"
        "    rewrite: {set: {memo: '\"to \" + args.to'}}\n")
NEEDS_OPS = ("  - id: transfers-need-ops\n    tools: [ops_transfer]\n    when: args.amount > 10\n    action: approve\n"
             "    message: Transfers over 10 need ops.\n"
             '    approval: {approvers: ["group:ops"], timeout: 60s, hold: 30s}\n')
CAP = ("  - id: no-big-transfers\n    tools: [ops_transfer]\n    when: args.amount > 100\n    action: reject\n"
       "    message: Transfers over 100 are not allowed.\n")
RULES = policy(MEMO, NEEDS_OPS, CAP)


def cid() -> str:
    return f"c-{uuid.uuid4().hex}"


def with_memo(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "memo": f"to {args['to']}"}


async def start(bench: Any, rules: str = RULES, **config: Any) -> Any:
    bench.upstream.tools["transfer"] = transfer_tool()
    return await bench.start(rules, **config)


async def held(bench: Any, gw: Any, call_id: str, args: dict[str, Any] | None = None) -> str:
    """A REST call answered 202 at once (retry mode); the approval request's id."""
    response = await bench.invoke(gw, TRANSFER, args or ASKED, call_id=call_id, wait="0")
    assert response.status_code == 202, response.text
    approval_id: str = response.json()["approval_id"]
    return approval_id


async def edit(bench: Any, gw: Any, approval_id: str, arguments: Any, who: str = "bob") -> Any:
    return await bench.decide(gw, who, approval_id, comment="paying less", arguments=arguments)


def events(gw: Any, kind: str, call_id: str) -> list[dict[str, Any]]:
    return [e for e in gw.audit_events() if e["event"] == kind and e.get("call_id") == call_id]


async def unchanged(bench: Any, gw: Any, approval_id: str) -> None:
    """The request is as it was before any edit: pending, no vote, no edit, nothing ran."""
    shown = await bench.approval(gw, approval_id)
    assert (shown["state"], shown["votes"], shown["edit"]) == ("pending", [], None)
    assert bench.upstream.runs == []
    assert not [e for e in gw.audit_events() if e["event"] == "approval.edited"]


# --- an edit the policies let go on ---------------------------------------------------------------------------


async def test_a_held_call_runs_once_with_the_edited_arguments_and_the_agent_reads_that_they_were_edited(bench):
    gw = await start(bench)
    call_id, edited = cid(), {"to": "acme", "amount": 50}
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            TRANSFER, ASKED, meta=call_meta(call_id), read_timeout_seconds=60)) as call:
        approval_id = (await bench.wait_pending(gw, call_id))["id"]
        decided = await edit(bench, gw, approval_id, edited)
        assert decided.status_code == 200, decided.text
        result = await finished(call)
        again = await client.call_tool(TRANSFER, ASKED, meta=call_meta(call_id))  # a retry: the one run's result

    shown = decided.json()
    assert shown["state"] == "approved"
    assert shown["edit"]["by"] == "bob" and shown["edit"]["arguments"] == edited
    assert shown["edit"]["final_args"] == with_memo(edited)  # the policies' rewrite applies to the edited call
    assert shown["edit"]["verdict"] == "approve"  # still over 10: bob's approval is for the edited call
    assert shown["original_args"] == ASKED and shown["final_args"] == with_memo(ASKED)
    # The held call ran the edited call, once; the agent's model reads first that it was edited, and how.
    assert bench.upstream.runs == [("transfer", with_memo(edited))]
    assert result.is_error is False
    note = result.content[0].text
    assert note.startswith("Note: an approver edited the arguments of this call before it ran.")
    assert '"amount": 50' in note and "90" not in note
    assert text_of(result).endswith("transfer done (run 1)")
    assert result.structured_content == {"tool": "transfer", "args": with_memo(edited), "run": 1}
    assert result.meta is not None and result.meta[EDITED] is True and result.meta[EDITED_ARGS] == edited
    assert (again.content, again.structured_content) == (result.content, result.structured_content)
    assert len(bench.upstream.runs) == 1

    stored = await bench.approval(gw, approval_id)
    assert stored["execution"]["state"] == "ran" and stored["edit"] == shown["edit"]
    [audited] = [e for e in gw.audit_events() if e["event"] == "approval.edited"]
    assert audited["approval_id"] == approval_id and audited["call_id"] == call_id
    assert (audited["original_args"], audited["edited_args"], audited["final_args"], audited["edited_by"]) == (
        ASKED, edited, with_memo(edited), "bob")
    [intent] = events(gw, "call.intent", call_id)
    assert intent["final_args"] == with_memo(edited) and intent["approval"]["edited_by"] == "bob"
    [ran] = [e for e in events(gw, "call.outcome", call_id) if e["upstream_outcome"]["status"] == "ok"]
    assert (ran["original_args"], ran["edited_args"], ran["final_args"], ran["edited_by"]) == (
        ASKED, edited, with_memo(edited), "bob")
    assert ran["decided_by"] == ["approvals/transfers-need-ops", "approvals/transfers-need-ops"]


async def test_an_edit_the_policies_allow_outright_runs_at_the_agents_retry_exactly_once(bench):
    gw = await start(bench)
    call_id, edited = cid(), {"to": "acme", "amount": 5}
    approval_id = await held(bench, gw, call_id)
    decided = await edit(bench, gw, approval_id, edited)
    assert decided.status_code == 200, decided.text
    assert decided.json()["edit"]["verdict"] == "allow"  # 5 needs no approval at all: fine to approve

    # The agent calls again with the arguments as it asked them (the request's key); the edited call runs.
    first = await bench.invoke(gw, TRANSFER, ASKED, call_id=call_id)
    second = await bench.invoke(gw, TRANSFER, ASKED, call_id=call_id)
    assert first.status_code == second.status_code == 200, first.text
    body = first.json()
    assert body["is_error"] is False and body["content"][0]["text"].startswith("Note: an approver edited")
    assert body["structured"]["args"] == with_memo(edited)
    assert body["meta"][EDITED] is True and body["meta"]["gateway/approval_id"] == approval_id
    assert second.json()["content"] == body["content"]
    assert bench.upstream.runs == [("transfer", with_memo(edited))]


# --- an edit the policies refuse ------------------------------------------------------------------------------


async def test_an_edit_the_policies_reject_is_refused_and_the_request_stays_pending(bench):
    gw = await start(bench)
    call_id = cid()
    approval_id = await held(bench, gw, call_id)

    refused = await edit(bench, gw, approval_id, {"to": "acme", "amount": 500})

    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["rule"], error["verdict"]) == ("edit-refused", "approvals/no-big-transfers", "reject")
    assert "Transfers over 100 are not allowed." in error["message"] and "still pending" in error["message"]
    await unchanged(bench, gw, approval_id)
    # The approver may still approve the call as asked: it runs as asked, with no note.
    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200
    ran = await bench.invoke(gw, TRANSFER, ASKED, call_id=call_id)
    assert ran.status_code == 200 and EDITED not in ran.json()["meta"]
    assert bench.upstream.runs == [("transfer", with_memo(ASKED))]


async def test_an_edit_that_needs_approvers_the_request_does_not_have_is_refused(bench):
    big = ("  - id: big-transfers-need-security\n    tools: [ops_transfer]\n    when: args.amount > 60\n"
           '    action: approve\n    approval: {approvers: ["group:security"], timeout: 60s}\n')
    gw = await start(bench, policy(MEMO, NEEDS_OPS, big, CAP))
    approval_id = await held(bench, gw, cid(), {"to": "acme", "amount": 30})  # ops only

    refused = await edit(bench, gw, approval_id, {"to": "acme", "amount": 80})  # would need security too

    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["rule"] == "approvals/big-transfers-need-security"
    await unchanged(bench, gw, approval_id)


async def test_an_edit_the_policies_refuse_by_the_time_it_is_released_does_not_run(bench):
    gw = await start(bench)
    call_id = cid()
    approval_id = await held(bench, gw, call_id)
    assert (await edit(bench, gw, approval_id, {"to": "mallory", "amount": 50})).status_code == 200
    revision = gw.gateway.revision
    blocked = ("  - id: never-mallory\n    tools: [ops_transfer]\n    when: args.to == 'mallory'\n"
               "    action: reject\n    message: Never pay mallory.\n")
    (gw.root / "policies" / "approvals.yaml").write_text(policy(MEMO, NEEDS_OPS, CAP, blocked), encoding="utf-8")
    deadline = time.monotonic() + STEP_SECONDS
    while gw.gateway.revision == revision:
        assert time.monotonic() < deadline, "the policies were not reloaded"
        await asyncio.sleep(0.05)

    first = await bench.invoke(gw, TRANSFER, ASKED, call_id=call_id)  # as asked: still held for ops, so released
    second = await bench.invoke(gw, TRANSFER, ASKED, call_id=call_id)

    assert first.status_code == 200 and first.json()["is_error"] is True
    assert first.json()["content"][0]["text"] == EDIT_NOT_RELEASED
    assert second.json()["content"] == first.json()["content"]
    assert bench.upstream.runs == []
    execution = (await bench.approval(gw, approval_id))["execution"]
    assert (execution["state"], execution["rule"]) == ("refused_at_release", "approvals/never-mallory")


# --- edits the tool cannot take, and people who may not edit ---------------------------------------------------


@pytest.mark.parametrize(("arguments", "status", "code", "says"), [
    ({"to": "acme", "amount": "lots"}, 422, "invalid-edit", "amount"),
    ({"to": "acme", "amount": 50, "note": "hi"}, 422, "invalid-edit", "note"),
    ({"to": "x" * 3000, "amount": 50}, 422, "invalid-edit", "too large"),
    ([{"to": "acme", "amount": 50}], 400, "invalid-decision", "JSON object"),
])
async def test_arguments_the_tool_cannot_take_are_a_clear_error_and_change_nothing(bench, arguments, status, code,
                                                                                   says):
    gw = await start(bench, limits={"call_timeout": 10, "max_argument_bytes": 2000})
    approval_id = await held(bench, gw, cid())

    refused = await edit(bench, gw, approval_id, arguments)

    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code and says in refused.json()["error"]["message"]
    await unchanged(bench, gw, approval_id)


async def test_edited_arguments_go_only_with_an_approval(bench):
    gw = await start(bench)
    approval_id = await held(bench, gw, cid())
    refused = await bench.decide(gw, "bob", approval_id, approve=False, comment="no",
                                 arguments={"to": "acme", "amount": 5})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid-decision"
    await unchanged(bench, gw, approval_id)


@pytest.mark.parametrize(("who", "status"), [
    ("frank", 403),  # in ops, but his key may not decide approvals
    ("erin", 403),  # an approver, but of no requirement of this request
    ("alice", 403),  # the requester (in ops): never her own call
])
async def test_only_an_approver_who_may_decide_the_request_can_edit_it(bench, who, status):
    gw = await start(bench)
    approval_id = await held(bench, gw, cid())

    refused = await edit(bench, gw, approval_id, {"to": "acme", "amount": 5}, who=who)

    assert refused.status_code == status, refused.text
    await unchanged(bench, gw, approval_id)


# --- redaction ---------------------------------------------------------------------------------------------------


async def test_the_decision_log_redacts_the_edited_arguments_as_it_redacts_the_others(bench):
    gw = await start(bench, approvals={"redact": False},
                     audit={"file": "data/audit.jsonl", "redact_patterns": ["acct-[0-9]+"]})
    call_id, edited = cid(), {"to": "acct-42", "amount": 50}
    approval_id = await held(bench, gw, call_id)
    assert (await edit(bench, gw, approval_id, edited)).status_code == 200

    ran = await bench.invoke(gw, TRANSFER, ASKED, call_id=call_id)

    assert bench.upstream.runs == [("transfer", with_memo(edited))]  # the tool gets the real values
    assert ran.json()["meta"][EDITED_ARGS] == {"to": "[REDACTED]", "amount": 50}  # the agent is told no more
    assert "acct-42" not in gw.audit_path.read_text(encoding="utf-8")
    [audited] = [e for e in gw.audit_events() if e["event"] == "approval.edited"]
    assert audited["edited_args"] == {"to": "[REDACTED]", "amount": 50}
    assert audited["redacted"] == ["/edited_args/to", "/final_args/to", "/final_args/memo"]
    [outcome] = [e for e in events(gw, "call.outcome", call_id) if e["upstream_outcome"]["status"] == "ok"]
    assert outcome["edited_args"] == {"to": "[REDACTED]", "amount": 50} and "/edited_args/to" in outcome["redacted"]


async def test_an_approval_request_never_stores_what_redaction_hides_so_such_edits_are_refused(bench):
    gw = await start(bench, audit={"file": "data/audit.jsonl", "redact_patterns": ["acct-[0-9]+"]})
    # Arguments stored redacted: the gateway does not have them to edit.
    redacted = await held(bench, gw, cid(), {"to": "acct-7", "amount": 90})
    refused = await edit(bench, gw, redacted, {"to": "[REDACTED]", "amount": 50})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "edit-not-possible"
    assert "redacted" in refused.json()["error"]["message"]
    # An edit that would put a redacted value in the request is refused too.
    plain = await held(bench, gw, cid())
    refused = await edit(bench, gw, plain, {"to": "acct-9", "amount": 50})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid-edit"
    for approval_id in (redacted, plain):
        await unchanged(bench, gw, approval_id)
