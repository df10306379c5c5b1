"""Hold calls for people to decide, exactly once: the approval service, assembled from its parts.

``ApprovalService`` is what the gateway builds (``app/root.py``) and hands around: the pipeline
holds it as its ``ApprovalGate``, the approver API and page read and decide through it, and the
gateway's lifespan runs its recovery, watcher and sweeper. Each concern lives in its own module:

- ``gate``: hold a call, find or create its request, and wait for the decision;
- ``claims``: the one run an approval allows (claim, lease, stored outcome, gone tools);
- ``decisions``: approvers reading and deciding requests, with their checks;
- ``edits``: approving with an edit of the arguments (decided again by the policies), and its release;
- ``expiry``: timeouts, lapses, set-asides, abandoned runs, and the sweeper;
- ``notification``: waking held calls, webhooks, audit events;
- ``records``: the store off the event loop, and the shared clock;
- ``messages``: what callers are told.

An approved request is claimed by exactly one caller, within its ``valid_for``; everyone else,
now or after a restart, waits for and gets the stored result of that one execution.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.approvals.claims import Claims
from gateway.approvals.decisions import Decisions
from gateway.approvals.edits import EditJudge, Edits
from gateway.approvals.expiry import Expiry
from gateway.approvals.gate import Gate
from gateway.approvals.messages import STORE_UNAVAILABLE
from gateway.approvals.model import Approval
from gateway.approvals.notification import Notification, Notifier
from gateway.approvals.records import Records
from gateway.approvals.store import ApprovalStore, ListFilter
from gateway.core.limits import APPROVAL_HEARTBEAT_SECONDS, APPROVAL_LEASE_SECONDS, APPROVAL_SWEEP_SECONDS
from gateway.core.redaction import Redaction
from gateway.pipeline.approvals import ApprovalResult, HeldCall
from gateway.policy.call import Principal

__all__ = ["STORE_UNAVAILABLE", "ApprovalService", "Notifier"]


class ApprovalService:
    """The approval gate, the approver API's backend, and the expiry sweeper, over one store."""

    def __init__(self, store: ApprovalStore, notifier: Notifier | None = None, page_url: str = "/approvals",
                 clock: Callable[[], float] = time.time, redact: Redaction | None = None, *,
                 lease_seconds: float = APPROVAL_LEASE_SECONDS, heartbeat_seconds: float = APPROVAL_HEARTBEAT_SECONDS,
                 audit: Callable[[dict[str, Any]], None] | None = None,
                 audit_redactor: Redaction | None = None) -> None:
        self.store = store
        self.notifier = notifier
        self.page_url = page_url.rstrip("/")
        self.instance_id = store.instance_id
        records = Records(store, clock)
        self.notification = Notification(notifier, audit, audit_redactor)
        self.expiry = Expiry(records, self.notification)
        self.decisions = Decisions(records, self.notification, self.expiry)
        self.claims = Claims(records, self.notification, lease_seconds=lease_seconds,
                             heartbeat_seconds=heartbeat_seconds)
        self.edits = Edits(self.decisions, self.claims, self.notification, redact)
        self.gate = Gate(records, self.notification, self.expiry, self.decisions, self.claims, self.edits,
                         self.page_url, redact)

    # -- the pipeline's ApprovalGate --------------------------------------------------------------

    async def hold(self, held: HeldCall) -> ApprovalResult:
        """Wait for the decision on this call (see ``gate``)."""
        return await self.gate.hold(held)

    async def executed(self, approval_id: str, result: dict[str, Any]) -> None:
        """Store the one execution's result, for every retry of the call."""
        await self.claims.executed(approval_id, result)

    async def released(self, approval_id: str) -> None:
        """The run never reached the upstream: the approval is usable again (within its validity)."""
        await self.claims.released(approval_id)

    async def orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        """A retry of an approved call whose tool is gone: the stored result, or "no longer available"."""
        return await self.claims.orphaned(principal_id, call_id, tool)

    # -- approvers ----------------------------------------------------------------------------------

    async def get(self, approval_id: str) -> Approval | None:
        """One request by id."""
        return await self.decisions.get(approval_id)

    async def listing(self, which: ListFilter, limit: int, offset: int) -> tuple[list[Approval], int]:
        """One page of requests (newest first) and how many match."""
        return await self.decisions.listing(which, limit, offset)

    @staticmethod
    def audience(approver: Principal, admin: bool) -> tuple[str, ...] | None:
        """The listing filter for what ``approver`` may see: None (everything) for an admin."""
        return Decisions.audience(approver, admin)

    @staticmethod
    def may_see(approval: Approval, approver: Principal, admin: bool) -> bool:
        """An admin sees every request; an approver those some requirement lets them decide."""
        return Decisions.may_see(approval, approver, admin)

    async def decide(self, approval_id: str, approver: Principal, approve: bool, comment: str = "") -> Approval:
        """Record an approver's decision; raises 404/403/409-mapped errors (503 if the database is locked)."""
        return await self.decisions.decide(approval_id, approver, approve, comment)

    async def approve_edited(self, approval_id: str, approver: Principal, arguments: dict[str, Any], comment: str,
                             judge: EditJudge) -> Approval:
        """Approve with the arguments edited, once ``judge`` (the request-stage policies) accepts the edited call;
        raises like ``decide``, and 409 ``edit-not-possible`` / 422 ``invalid-edit``, ``edit-refused``."""
        return await self.edits.approve_edited(approval_id, approver, arguments, comment, judge)

    # -- the gateway's lifespan -----------------------------------------------------------------------

    def watch(self) -> None:
        """Wake held calls when another process changes their request (call once, on the event loop)."""
        self.notification.watch(self.store)

    async def recover(self) -> int:
        """At start: mark runs whose claim's lease ran out as interrupted; how many were."""
        return await self.expiry.recover()

    async def expire(self, approval: Approval) -> None:
        """Apply the request's on_timeout: expired (reject) or approved (allow)."""
        await self.expiry.expire(approval)

    async def sweep(self, interval: float = APPROVAL_SWEEP_SECONDS) -> None:
        """Expire requests nobody is waiting on, and mark abandoned runs; runs until cancelled."""
        await self.expiry.sweep(interval)

    async def aclose(self) -> None:
        """Stop lease renewals and retries, and let webhook deliveries in flight finish (briefly)."""
        await self.claims.aclose()
        await self.notification.aclose()
