"""When a request stops applying: it timed out, was not used in time, was set aside, or its run was abandoned.

- An undecided request past its timeout gets its ``on_timeout``: expired (reject) or approved (allow).
- An approved request not used within its ``valid_for`` (or approved only after it had expired)
  lapses: expired unused.
- A request whose requirements no longer cover the call's (the policies now need other approvers)
  is set aside, and its key freed for the call to ask afresh.
- A claim whose lease ran out (its process died mid-run) is marked "interrupted": the call may or may
  not have run, so it is never run again. A claim under a live lease belongs to a running gateway
  (perhaps another one on the same database) and is left alone.

Held calls apply these as they find them; ``sweep`` applies them to requests nobody waits on.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.approvals.messages import lapse_reason, late_vote, refusal
from gateway.approvals.model import POLICY_CHANGE, Approval, ApprovalState, Requirement, Vote
from gateway.approvals.notification import Notification
from gateway.approvals.records import Records
from gateway.core.clock import now_rfc3339
from gateway.core.errors import StoreUnavailable
from gateway.core.limits import APPROVAL_SWEEP_SECONDS

__all__ = ["Expiry"]

log = logging.getLogger("gateway.approvals")


class Expiry:
    """Timeouts, lapses, set-asides and abandoned runs, and the sweeper that finds them."""

    def __init__(self, records: Records, notification: Notification) -> None:
        self._records = records
        self._store = records.store
        self._notification = notification

    async def expire(self, approval: Approval) -> None:
        """Apply the request's on_timeout: expired (reject) or approved (allow)."""
        if approval.state is not ApprovalState.PENDING:
            return
        allow = approval.on_timeout == "allow"
        approval.state = ApprovalState.APPROVED if allow else ApprovalState.EXPIRED
        approval.decided_at, approval.decided_ts = now_rfc3339(), self._records.clock()
        approval.votes.append(Vote("timeout", [], allow, f"expired; on_timeout {approval.on_timeout}",
                                   approval.decided_at))
        if await self._records.run(self._store.transition, approval, ApprovalState.PENDING):
            self._notification.signal(approval.id)
            self._notification.notify("approval.expired", approval)

    async def lapsed(self, approval: Approval, now: float, *, retire: bool = True) -> bool:
        """Expire an approved request that may no longer be used; True if it was (or someone else did).

        A caller finding it retires it at once (it is told so now); the sweeper leaves it holding its key
        until the agent's next identical call is told "expired unused" (see ``Gate``'s ``_told``).
        """
        valid_until = approval.valid_until_ts
        if not late_vote(approval) and (valid_until is None or now <= valid_until):
            return False
        approval.state, approval.retired = ApprovalState.EXPIRED, retire
        reason = lapse_reason(approval)
        approval.votes.append(Vote("validity", [], False, reason, now_rfc3339()))
        if await self._records.run(self._store.transition, approval, ApprovalState.APPROVED):
            self._notification.signal(approval.id)
            self._notification.notify("approval.expired", approval)
            self._notification.audit("approval.lapsed", approval, reason=reason)
            log.info("approval %s lapsed: %s", approval.id, reason)
        return True

    async def set_aside(self, approval: Approval, missing: list[Requirement]) -> None:
        """Expire an undecided or unused request that does not cover the call's current requirements, and free
        its key (if someone else changed it first, the caller finds what they made of it when it looks again)."""
        expected = approval.state
        reason = "the policies now need approval by " + "; ".join(
            f"{r.rule}: {', '.join(r.approvers) or 'any approver'}" for r in missing)
        approval.state, approval.retired, approval.owner, approval.lease_ts = ApprovalState.EXPIRED, True, None, None
        approval.votes.append(Vote(POLICY_CHANGE, [], False, reason, now_rfc3339()))
        approval.decided_at = approval.decided_at or approval.votes[-1].at
        if await self._records.run(self._store.transition, approval, expected):
            self._notification.signal(approval.id)
            self._notification.notify("approval.expired", approval)
            self._notification.audit("approval.superseded", approval, reason=reason)
            log.info("approval %s set aside: %s", approval.id, reason)

    async def interrupt(self, approval: Approval, now: float) -> None:
        """Mark a claim whose lease ran out: its process died mid-run, so the call may or may not have run."""
        approval.state = ApprovalState.EXECUTED
        approval.result = refusal(
            approval.call_id, "interrupted",
            "The approved call was interrupted (the gateway running it stopped); it may or may not have taken effect.",
            approval.id)
        owner, approval.owner, approval.lease_ts = approval.owner, None, None
        if await self._records.run(self._store.interrupt, approval, now):
            log.warning("approval %s: the run claimed by gateway %s was abandoned; marked interrupted",
                        approval.id, owner)
            self._notification.signal(approval.id)

    async def recover(self) -> int:
        """At start: mark runs whose claim's lease ran out (their process died) as interrupted.

        Claims still under a live lease belong to another running gateway on this database and
        are left alone. Returns how many were marked; their tools may or may not have run, so
        they are not run again.
        """
        now = self._records.clock()
        stale = await self._records.run(self._store.abandoned, now)
        for approval in stale:
            await self.interrupt(approval, now)
        return len(stale)

    async def sweep(self, interval: float = APPROVAL_SWEEP_SECONDS) -> None:
        """Expire requests nobody is waiting on, and mark abandoned runs; runs until cancelled."""
        while True:
            try:
                now = self._records.clock()
                for approval in await self._records.run(self._store.due, now):
                    await self.expire(approval)
                for approval in await self._records.run(self._store.in_state, ApprovalState.APPROVED):
                    await self.lapsed(approval, now, retire=False)  # approved, never called again: expired unused
                for approval in await self._records.run(self._store.abandoned, now):
                    await self.interrupt(approval, now)
            except StoreUnavailable as exc:  # try again next time; the sweeper must not die
                log.warning("approval sweep skipped: %s", exc)
            await asyncio.sleep(interval)
