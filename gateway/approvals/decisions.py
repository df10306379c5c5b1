"""Approvers deciding: what each approver may see, and recording an approve or deny with its checks.

A decision is accepted only on an undecided request that has not expired, from someone other than
the caller who asked, for a requirement that lets them decide it (their user id, one of their
groups, or a rule open to any approver). The requester's own client, asked through MCP elicitation,
answers only for a requirement that names the requester (``self``). A request is approved when
every requirement is satisfied, denied by the first refusal; two approvers deciding at once are
told which one came first (the store's guarded transition).
"""

from __future__ import annotations

from gateway.approvals.expiry import Expiry
from gateway.approvals.model import Approval, ApprovalState, Edit, Requirement, Vote, qualifies, seen_as
from gateway.approvals.notification import Notification
from gateway.approvals.records import Records
from gateway.approvals.store import ListFilter
from gateway.core.clock import now_rfc3339
from gateway.core.errors import ApprovalConflict, ApprovalForbidden, ApprovalNotFound
from gateway.policy.call import Principal

__all__ = ["Decisions"]


class Decisions:
    """The approver API's backend: read and list requests, and record decisions on them."""

    def __init__(self, records: Records, notification: Notification, expiry: Expiry) -> None:
        self._records = records
        self._store = records.store
        self._notification = notification
        self._expiry = expiry

    async def get(self, approval_id: str) -> Approval | None:
        """One request by id."""
        return await self._records.run(self._store.get, approval_id)

    async def listing(self, which: ListFilter, limit: int, offset: int) -> tuple[list[Approval], int]:
        """One page of requests (newest first) and how many match."""
        return await self._records.run(self._store.list_requests, None, limit, offset, which)

    @staticmethod
    def audience(approver: Principal, admin: bool) -> tuple[str, ...] | None:
        """The listing filter for what ``approver`` may see: None (everything) for an admin."""
        return None if admin else tuple(seen_as(approver))

    @staticmethod
    def may_see(approval: Approval, approver: Principal, admin: bool) -> bool:
        """An admin sees every request; an approver those some requirement lets them decide."""
        return admin or any(qualifies(approver, r.approvers) for r in approval.requirements)

    async def decide(self, approval_id: str, approver: Principal, approve: bool, comment: str = "",
                     *, elicitation: bool = False) -> Approval:
        """Record a decision (``elicitation``: the requester's own answer); raises 404/403/409-mapped errors
        (503 if the database is locked)."""
        approval, open_reqs = await self.open(approval_id, approver, elicitation=elicitation)
        return await self.record(approval, open_reqs, approver, approve, comment)

    async def open(self, approval_id: str, approver: Principal, *,
                   elicitation: bool = False) -> tuple[Approval, list[Requirement]]:
        """The undecided request and the open requirements ``approver`` may decide; raises 404/403/409-mapped errors
        (an expired request is expired here)."""
        approval = await self._records.run(self._store.get, approval_id)
        if approval is None:
            raise ApprovalNotFound(f"no approval request {approval_id}")
        if approval.state is ApprovalState.PENDING and self._records.clock() >= approval.expires_ts:
            await self._expiry.expire(approval)
            raise ApprovalConflict(f"approval {approval_id} expired at {approval.expires_at}; "
                                   "a decision after that is not accepted")
        if approval.state is not ApprovalState.PENDING:
            raise ApprovalConflict(f"approval {approval_id} is already {approval.state}")
        # Neither the same caller (its binding key) nor one the page shows by the same id may approve.
        if not elicitation and (approver.key == approval.principal.key or approver.id == approval.principal.id):
            raise ApprovalForbidden("you cannot approve your own call")
        # The requester's own client answers only for a requirement that names the requester (``self``).
        open_reqs = [r for r in approval.requirements if r.satisfied_by is None
                     and (r.asks_requester if elicitation else qualifies(approver, r.approvers))]
        if not open_reqs:
            raise ApprovalForbidden("you are not an approver of any open requirement of this request")
        return approval, open_reqs

    async def record(self, approval: Approval, open_reqs: list[Requirement], approver: Principal, approve: bool,
                     comment: str, edit: Edit | None = None) -> Approval:
        """Record ``approver``'s vote on ``open_reqs`` of the request read by ``open`` (with ``edit``: approved as
        edited); raises 409 when someone else decided it meanwhile."""
        vote = Vote(approver.id, list(approver.groups), approve, comment, now_rfc3339())
        if approve:
            for requirement in open_reqs:
                requirement.satisfied_by = approver.id
                vote.rules.append(requirement.rule)
            if all(r.satisfied_by for r in approval.requirements):
                approval.state = ApprovalState.APPROVED
            approval.edit = edit
        else:
            approval.state = ApprovalState.DENIED
        approval.votes.append(vote)
        if approval.state is not ApprovalState.PENDING:
            approval.decided_at, approval.decided_ts = vote.at, self._records.clock()
        if not await self._records.run(self._store.transition, approval, ApprovalState.PENDING):
            raise ApprovalConflict(f"approval {approval.id} was decided by someone else just now")
        self._notification.signal(approval.id)
        if approval.state is not ApprovalState.PENDING:
            self._notification.notify("approval.decided", approval)
        return approval
