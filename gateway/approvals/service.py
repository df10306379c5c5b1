"""Hold calls for people to decide, exactly once.

``hold`` is the ``ApprovalGate`` the pipeline calls when the verdict is approve. It finds or
creates the request bound to (principal, call id, digest of the final arguments), then waits —
sending progress — until the request is decided, expires, or the caller stops waiting. An
approved request is claimed (approved → executing) by exactly one caller; everyone else, now or
after a restart, gets the stored result of that one execution.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from gateway.approvals.model import Approval, ApprovalState, Requirement, Vote, args_digest, qualifies
from gateway.approvals.store import ApprovalStore
from gateway.errors import ApprovalConflict, ApprovalForbidden, ApprovalNotFound
from gateway.limits import APPROVAL_PROGRESS_SECONDS, APPROVAL_SWEEP_SECONDS
from gateway.pipeline.approvals import ApprovalResult, HeldCall
from gateway.policy.call import Principal
from gateway.store.sqlite import now_rfc3339

__all__ = ["ApprovalService", "Notifier"]

log = logging.getLogger("gateway.approvals")

# Votes cast by the end user through MCP elicitation are recorded under this prefix.
END_USER = "end-user:"

# An elicitation callback: ask the end user; True accept, False decline, None cannot ask.
Elicit = Callable[[str], Awaitable[bool | None]]


class Notifier(Protocol):
    """Tells the outside world about approvals (webhooks); must never block or raise."""

    def notify(self, event: str, approval: Approval) -> None:
        """Queue delivery of ``event`` ("approval.created", ".decided", ".expired")."""
        ...

    async def aclose(self) -> None:
        """Finish or drop deliveries in flight."""
        ...


class ApprovalService:
    """The approval gate, the approver API's backend, and the expiry sweeper."""

    def __init__(self, store: ApprovalStore, notifier: Notifier | None = None, page_url: str = "/approvals",
                 clock: Callable[[], float] = time.time, redact: Callable[[Any], Any] | None = None) -> None:
        self.store = store
        self._redact = redact  # applied to the arguments before a request is stored, listed or announced
        self.notifier = notifier
        self.page_url = page_url.rstrip("/")
        self._clock = clock
        self._changed: dict[str, asyncio.Event] = {}

    # -- the gate -------------------------------------------------------------------------------

    async def hold(self, held: HeldCall) -> ApprovalResult:
        """Wait for the decision on this call (see the module docstring)."""
        approval = self._find_or_create(held)
        deadline = None if held.request.wait_seconds is None else self._clock() + held.request.wait_seconds
        elicit: Elicit | None = held.request.elicit
        if approval.state is not ApprovalState.PENDING or elicit is None \
                or not any(r.via == "elicitation" and r.satisfied_by is None for r in approval.requirements):
            return await self._await(approval.id, held, deadline)
        # Ask the end user while waiting, not before: an approver on the page, the timeout or the
        # caller's deadline must end the wait even if the user never answers.
        asking = asyncio.create_task(self._elicit(approval, held, elicit))
        try:
            return await self._await(approval.id, held, deadline)
        finally:
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)

    def _find_or_create(self, held: HeldCall) -> Approval:
        request, decision = held.request, held.decision
        digest = args_digest(decision.args)
        found = self.store.find(request.principal.id, request.call_id, digest)
        if found is not None:
            return found
        now = self._clock()
        timeout = min((a.timeout_seconds for a in decision.approvals), default=900.0)
        on_timeout = "reject" if any(str(a.on_timeout) == "reject" for a in decision.approvals) else "allow"
        approval = Approval(
            id=uuid.uuid4().hex[:16], call_id=request.call_id, digest=digest, principal=request.principal,
            session_id=request.session_id, tool=request.tool, original_args=decision.original_args,
            final_args=decision.args,
            requirements=[Requirement(a.rule, a.message or decision.message or "", list(a.approvers), None, a.via)
                          for a in decision.approvals],
            created_at=now_rfc3339(), expires_at=_rfc3339(now + timeout), expires_ts=now + timeout,
            on_timeout=on_timeout,
        )
        if self._redact is not None:
            approval = approval.redacted(self._redact)
        stored = self.store.insert(approval)
        if stored.id == approval.id:
            log.info("approval %s created for %s (call %s)", approval.id, approval.tool, approval.call_id)
            self._notify("approval.created", approval)
        return stored

    async def _await(self, approval_id: str, held: HeldCall, deadline: float | None) -> ApprovalResult:
        announced = False
        while True:
            approval = self.store.get(approval_id)
            if approval is None:  # only if the database was changed under us
                return ApprovalResult(False, "The approval request disappeared.", approval_id)
            state = approval.state
            if state is ApprovalState.EXECUTED:
                return ApprovalResult(False, approval_id=approval_id, replay=approval.result)
            if state is ApprovalState.DENIED:
                return ApprovalResult(False, _denial_message(approval), approval_id)
            if state is ApprovalState.EXPIRED:
                return ApprovalResult(False, "Nobody approved this call in time, so it was not run.", approval_id)
            if state is ApprovalState.APPROVED:
                approval.state = ApprovalState.EXECUTING
                if self.store.transition(approval, ApprovalState.APPROVED):
                    return ApprovalResult(True, approval_id=approval_id)
                continue  # another caller claimed it; wait for its result
            now = self._clock()
            if state is ApprovalState.PENDING and now >= approval.expires_ts:
                self.expire(approval)
                continue
            if deadline is not None and now >= deadline:
                return ApprovalResult(False, f"Waiting for approval {approval_id}: {self.page_url}/{approval_id}",
                                      approval_id, pending=True)
            # Taken after reading the state and before anything awaits (the progress report), so no
            # decision from here on goes unnoticed; a request in a final state never leaves one behind.
            changed = self._changed.setdefault(approval_id, asyncio.Event())
            if not announced and held.request.progress is not None:
                announced = True
                await self._progress(held, approval)
            limits = [approval.expires_ts - now, APPROVAL_PROGRESS_SECONDS]
            if deadline is not None:
                limits.append(deadline - now)
            if not await _wait(changed, max(0.01, min(limits))) and held.request.progress:
                await self._progress(held, approval)

    async def _progress(self, held: HeldCall, approval: Approval) -> None:
        assert held.request.progress is not None
        left = max(0, int(approval.expires_ts - self._clock()))
        try:
            await held.request.progress(
                f"Waiting for approval {approval.id} ({left}s left): {self.page_url}/{approval.id}")
        except Exception as exc:  # a gone client must not lose the approval
            log.info("progress for approval %s not delivered: %s", approval.id, exc)

    async def _elicit(self, approval: Approval, held: HeldCall, elicit: Elicit) -> None:
        message = "; ".join(r.message for r in approval.requirements if r.via == "elicitation") or \
            f"Allow the call to {approval.tool}?"
        answer = await elicit(f"{message}\nTool: {approval.tool}\nArguments: {approval.final_args}")
        if answer is None:
            return  # the client cannot ask; the page remains
        voter = Principal(f"{END_USER}{held.request.principal.id}", ())
        try:
            self._record(approval.id, voter, answer, "via MCP elicitation", elicitation=True)
        except (ApprovalConflict, ApprovalForbidden):
            pass  # decided meanwhile on the page

    # -- approvers --------------------------------------------------------------------------------

    def decide(self, approval_id: str, approver: Principal, approve: bool, comment: str = "") -> Approval:
        """Record an approver's decision; raises 404/403/409-mapped errors."""
        return self._record(approval_id, approver, approve, comment)

    def _record(self, approval_id: str, approver: Principal, approve: bool, comment: str,
                *, elicitation: bool = False) -> Approval:
        approval = self.store.get(approval_id)
        if approval is None:
            raise ApprovalNotFound(f"no approval request {approval_id}")
        if approval.state is not ApprovalState.PENDING:
            raise ApprovalConflict(f"approval {approval_id} is already {approval.state}")
        if not elicitation and approver.id == approval.principal.id:
            raise ApprovalForbidden("you cannot approve your own call")
        open_reqs = [r for r in approval.requirements if r.satisfied_by is None
                     and (r.via == "elicitation" if elicitation else qualifies(approver, r.approvers))]
        if not open_reqs:
            raise ApprovalForbidden("you are not an approver of any open requirement of this request")
        vote = Vote(approver.id, list(approver.groups), approve, comment, now_rfc3339())
        if approve:
            for requirement in open_reqs:
                requirement.satisfied_by = approver.id
                vote.rules.append(requirement.rule)
            if all(r.satisfied_by for r in approval.requirements):
                approval.state = ApprovalState.APPROVED
        else:
            approval.state = ApprovalState.DENIED
        approval.votes.append(vote)
        if approval.state is not ApprovalState.PENDING:
            approval.decided_at = vote.at
        if not self.store.transition(approval, ApprovalState.PENDING):
            raise ApprovalConflict(f"approval {approval_id} was decided by someone else just now")
        self._signal(approval_id)
        if approval.state is not ApprovalState.PENDING:
            self._notify("approval.decided", approval)
        return approval

    def expire(self, approval: Approval) -> None:
        """Apply the request's on_timeout: expired (reject) or approved (allow)."""
        if approval.state is not ApprovalState.PENDING:
            return
        allow = approval.on_timeout == "allow"
        approval.state = ApprovalState.APPROVED if allow else ApprovalState.EXPIRED
        approval.decided_at = now_rfc3339()
        approval.votes.append(Vote("timeout", [], allow, f"expired; on_timeout {approval.on_timeout}",
                                   approval.decided_at))
        if self.store.transition(approval, ApprovalState.PENDING):
            self._signal(approval.id)
            self._notify("approval.expired", approval)

    def executed(self, approval_id: str, result: dict[str, Any]) -> None:
        """Store the one execution's result, for every retry of the call."""
        approval = self.store.get(approval_id)
        if approval is None or approval.state is not ApprovalState.EXECUTING:
            return
        approval.state = ApprovalState.EXECUTED
        approval.result = result
        self.store.transition(approval, ApprovalState.EXECUTING)
        self._signal(approval_id)

    def orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        """A retry of an approved call whose tool is gone: the stored result, or "no longer available".

        A still-pending request is left as it is (the tool may come back before it is decided).
        """
        for approval in self.store.for_call(principal_id, call_id):
            if approval.tool != tool:
                continue
            if approval.state is ApprovalState.EXECUTED and approval.result is not None:
                return approval.result
            if approval.state is ApprovalState.APPROVED:
                approval.state = ApprovalState.EXECUTING
                if self.store.transition(approval, ApprovalState.APPROVED):
                    result = _refusal(call_id, "tool_unavailable",
                                      f"The tool {tool} is no longer available, so the approved call was not run.",
                                      approval.id)
                    self.executed(approval.id, result)
                    return result
            if approval.state is ApprovalState.DENIED:
                return _refusal(call_id, "reject", _denial_message(approval), approval.id)
        return None

    def recover(self) -> int:
        """At start: runs claimed by a process that died never recorded their outcome; say so.

        Returns how many were marked. Their tools may or may not have run, so they are not run again.
        """
        stale = self.store.in_state(ApprovalState.EXECUTING)
        for approval in stale:
            self.executed(approval.id, _refusal(
                approval.call_id, "interrupted",
                "The approved call was interrupted by a gateway restart; it may or may not have taken effect.",
                approval.id))
        return len(stale)

    def _notify(self, event: str, approval: Approval) -> None:
        if self.notifier is not None:
            self.notifier.notify(event, approval)

    async def aclose(self) -> None:
        """Let webhook deliveries in flight finish (briefly)."""
        if self.notifier is not None:
            await self.notifier.aclose()

    def _signal(self, approval_id: str) -> None:
        """Wake every caller waiting on this request; the next wait takes a fresh event.

        Waiters never remove the event themselves: one that woke first would take away the
        event a slower one is about to wait on, and that one would sleep through the next change.
        """
        event = self._changed.pop(approval_id, None)
        if event is not None:
            event.set()

    async def sweep(self, interval: float = APPROVAL_SWEEP_SECONDS) -> None:
        """Expire requests nobody is waiting on, so pages and webhooks see it; runs until cancelled."""
        while True:
            for approval in self.store.due(self._clock()):
                self.expire(approval)
            await asyncio.sleep(interval)


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` was set within ``seconds``."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
        return True
    except TimeoutError:
        return False


def _denial_message(approval: Approval) -> str:
    vote = next((v for v in reversed(approval.votes) if not v.approve), None)
    if vote is not None and vote.approver.startswith(END_USER):
        return "The user declined this call."
    comment = vote.comment if vote else ""
    return f"Denied by an approver: {comment}" if comment else "Denied by an approver."


def _refusal(call_id: str, decision: str, message: str, approval_id: str) -> dict[str, Any]:
    """A refusal in the stored-outcome shape (what CallOutcome.to_rest gives)."""
    return {"call_id": call_id, "decision": decision, "is_error": True,
            "content": [{"type": "text", "text": message}], "structured": None,
            "meta": {"gateway/call_id": call_id, "gateway/decision": decision, "gateway/approval_id": approval_id}}


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
