"""An approver edits a held call's arguments and approves the edited call; when it is claimed, that call runs.

Approving with an edit (``approve_edited``, the approver API):

1. The approver must be one who may decide the request (``Decisions.open``: not the requester, one of the
   approvers of its open requirements), and the request must be editable: no approver has approved the
   arguments as asked yet, this approver's approval completes it (nobody else would be approving arguments
   they did not choose), its arguments were stored whole (not redacted) and the gateway runs the tool (an
   agent-run tool of the model proxy is not: its input schema is the agent's).
2. The edited arguments are checked and decided by the request-stage policies in force, for the held call's
   principal and run (``judge``: the pipeline's ``Questions.judge_edit``). Only a verdict that would have let
   the call go on — allow, or approve with requirements this request covers — is accepted: a reject,
   terminate or skip refuses the edit with the rule and its message, and the request stays pending. So an
   edit can never turn a call the policies refuse into an allowed one.
3. Arguments the gateway would redact (``approvals.redact``) are refused, before and after the rewrites: the
   request must keep them to run them, and stores only what redaction leaves.
4. The vote and the ``Edit`` (who, the approver's arguments, the final arguments, their digest) are recorded
   in one guarded transition (pending → approved), announced to webhooks, and written to the audit log as
   ``approval.edited`` with the arguments redacted.

At the claim (``released``), the held call (or the agent's retry with the arguments as asked: the request's
key is still their digest) decides the edited arguments again on its own request-stage input. It runs them
only if the policies still let it go on and make exactly the approved final arguments of them; otherwise the
approval's one execution is a refusal (``refused_at_release``), and nothing runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.approvals.claims import Claims
from gateway.approvals.decisions import Decisions
from gateway.approvals.messages import EDIT_NOT_RELEASED, refusal
from gateway.approvals.model import Approval, Edit, Requirement, args_digest, requirements_of, uncovered
from gateway.approvals.notification import Notification
from gateway.core.clock import now_rfc3339
from gateway.core.errors import EditInvalid, EditNotPossible, EditRefused
from gateway.core.redaction import Redaction
from gateway.pipeline.approvals import ApprovalResult, EditedCall, HeldCall, ReleasedEdit
from gateway.pipeline.results import REFUSED_AT_RELEASE
from gateway.policy.call import Principal
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.policy.decision import Decision, Verdict

__all__ = ["EditJudge", "Edits"]

# What decides an edit: the request and the approver's arguments to the pipeline's decision on them.
EditJudge = Callable[[Approval, dict[str, Any]], Awaitable[EditedCall]]

# The verdicts an edited call may have to be approved: those that would have let it go on.
_GOES_ON = frozenset({Verdict.ALLOW, Verdict.APPROVE})


class Edits:
    """Approvals with an edit of the arguments, and the release of an edited approval."""

    def __init__(self, decisions: Decisions, claims: Claims, notification: Notification,
                 redact: Redaction | None = None) -> None:
        self._decisions = decisions
        self._claims = claims
        self._notification = notification
        self._redact = redact  # approvals.redact: what the store may not hold

    async def approve_edited(self, approval_id: str, approver: Principal, arguments: dict[str, Any], comment: str,
                             judge: EditJudge) -> Approval:
        """Approve the request with ``arguments`` in place of the call's (see the module docstring); raises
        404/403/409 like a decision, 409 ``edit-not-possible``, 422 ``invalid-edit`` or ``edit-refused``."""
        approval, open_reqs = await self._decisions.open(approval_id, approver)
        _editable(approval, open_reqs)
        self._storable(arguments, "The edited arguments")
        decision = _accepted(approval, await judge(approval, arguments))
        self._storable(decision.args, "The policies' rewrite of the edited arguments")
        edit = Edit(approver.id, now_rfc3339(), arguments, decision.args, args_digest(decision.args),
                    str(decision.verdict), decision.decided_by)
        # Read again: the request may have been decided while the policies were asked.
        approval, open_reqs = await self._decisions.open(approval_id, approver)
        _editable(approval, open_reqs)
        approval = await self._decisions.record(approval, open_reqs, approver, True, comment, edit)
        self._notification.audit_edit(approval)
        return approval

    def _storable(self, arguments: dict[str, Any], what: str) -> None:
        if self._redact is not None and self._redact.finds(arguments):
            raise EditInvalid(f"{what} hold values the gateway redacts (audit.redact_keys, audit.redact_patterns), "
                              "which an approval request may not keep; approve the call as asked, or deny it.")

    async def released(self, approval: Approval, held: HeldCall) -> ApprovalResult:
        """The claimed approval's edited call: approved to run as decided again now, or its one execution refused."""
        edit = approval.edit
        assert edit is not None
        decision = None if held.redecide is None else held.redecide(edit.arguments)
        if decision is not None and decision.verdict in _GOES_ON and args_digest(decision.args) == edit.digest \
                and not (decision.verdict is Verdict.APPROVE and _needs_more(approval, decision)):
            return ApprovalResult(True, approval_id=approval.id, edit=ReleasedEdit(decision, edit.arguments, edit.by))
        refused = refusal(held.request.call_id, "reject", EDIT_NOT_RELEASED, approval.id)
        refused["meta"][REFUSED_AT_RELEASE] = (decision.decided_by if decision is not None else None) or "edit"
        await self._claims.executed(approval.id, refused)
        return ApprovalResult(False, approval_id=approval.id, replay=refused)


def _editable(approval: Approval, open_reqs: list[Requirement]) -> None:
    """Raise ``EditNotPossible`` unless this approver may approve the request with an edit, alone."""
    if approval.upstream == CLIENT_UPSTREAM:
        raise EditNotPossible("This call is to a tool the agent runs itself (through the model proxy): the gateway "
                              "does not hold its input schema, so its arguments cannot be edited. Approve it as "
                              "asked, or deny it.")
    if approval.args_redacted:
        raise EditNotPossible("The arguments of this request were redacted before they were stored "
                              "(approvals.redact), so the gateway does not have them to edit. Approve it as asked, "
                              "or deny it.")
    approved = sorted({r.satisfied_by for r in approval.requirements if r.satisfied_by})
    if approved:
        raise EditNotPossible(f"{', '.join(approved)} already approved the arguments as asked, so they can no longer "
                              "be edited. Approve them as asked, or deny the call.")
    if len(open_reqs) < len(approval.requirements):
        raise EditNotPossible("This request also needs other approvers, who would be approving arguments they did "
                              "not choose, so only its approvers together can change them: approve it as asked, "
                              "or deny it with the change you want in the comment.")


def _accepted(approval: Approval, judged: EditedCall) -> Decision:
    """The decision on the edited call if the edit may be approved; else ``EditInvalid`` or ``EditRefused``."""
    decision = judged.decision
    if decision is None:
        raise EditInvalid(judged.problem or "The edited arguments cannot be decided.")
    rule = decision.decided_by
    if decision.verdict not in _GOES_ON:
        said = f": {decision.message}" if decision.message else ""
        raise EditRefused(f"The policies {_refuse(decision.verdict)} the edited call (rule {rule or 'default'}{said}), "
                          "so it was not approved; the request is still pending.", rule, str(decision.verdict))
    if decision.verdict is Verdict.APPROVE and (missing := _needs_more(approval, decision)):
        rules = ", ".join(r.rule for r in missing)
        raise EditRefused(f"The edited call needs approvals this request does not have ({rules}), so it was not "
                          "approved; the request is still pending.", missing[0].rule, str(decision.verdict))
    return decision


def _needs_more(approval: Approval, decision: Decision) -> list[Requirement]:
    """The requirements of the edited call's approve verdict that the request's (now met) ones do not cover."""
    return uncovered(approval.requirements, requirements_of(decision))


def _refuse(verdict: Verdict) -> str:
    return {Verdict.TERMINATE: "would end the run on", Verdict.SKIP: "would skip"}.get(verdict, "reject")
