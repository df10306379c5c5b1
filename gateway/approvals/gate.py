"""The gate: hold a call that needs approval, and wait for its decision.

``hold`` is what the pipeline calls (through ``ApprovalGate``) when the verdict is approve. It finds
or creates the request bound to (principal, upstream, exposed tool, call id, digest of the final
arguments) — without a call id, to the run instead, or to no run for an implicit one (see
``model.Binding``) — whose requirements cover the call's. A request found with requirements that do
not (the policies now need other approvers) is set aside, and the call asks afresh; so is one found
approved when the call, decided again by the policies in force at the claim, needs more. It then
waits — sending progress, and asking the end user through MCP elicitation where a rule names them —
until the request is decided, expires, or the caller stops waiting. An approved request is claimed
for the one run it allows (see ``claims``), within its ``valid_for``; one an approver approved with an edit of
the arguments runs the edited call instead, decided again first (see ``edits``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from gateway.approvals.claims import Claims
from gateway.approvals.decisions import Decisions
from gateway.approvals.edits import Edits
from gateway.approvals.expiry import Expiry
from gateway.approvals.messages import (
    END_USER,
    NOT_REACHED_WAITER,
    POLICIES_CHANGED,
    STORE_UNAVAILABLE,
    denial_message,
    expired_message,
    lapse_of,
    pending_message,
    set_aside_by,
)
from gateway.approvals.model import (
    FINAL_STATES,
    Approval,
    ApprovalState,
    Requirement,
    args_digest,
    json_safe,
    requirements_of,
    uncovered,
)
from gateway.approvals.notification import Notification
from gateway.approvals.records import Records
from gateway.core.clock import now_rfc3339, rfc3339
from gateway.core.errors import ApprovalConflict, ApprovalForbidden, StoreUnavailable
from gateway.core.limits import (
    APPROVAL_LOOKUP_ATTEMPTS,
    APPROVAL_POLL_SECONDS,
    APPROVAL_PROGRESS_SECONDS,
    DEFAULT_APPROVAL_HOLD_SECONDS,
    DEFAULT_APPROVAL_VALID_SECONDS,
)
from gateway.core.redaction import Redaction
from gateway.pipeline.approvals import ApprovalResult, HeldCall
from gateway.policy.call import Principal
from gateway.policy.decision import Decision, Verdict

__all__ = ["Elicit", "Gate"]

log = logging.getLogger("gateway.approvals")

# An elicitation callback: ask the end user; True accept, False decline, None cannot ask.
Elicit = Callable[[str], Awaitable[bool | None]]

# One look at the request while waiting: the answer for the caller, a decision to hold the call for
# afresh (the policies now need more), or None: look again.
Step = ApprovalResult | Decision | None


@dataclass(slots=True)
class _Waiting:
    """A held call's wait on one request: until when, and what it has seen and said so far."""

    held: HeldCall
    deadline: float
    next_progress: float
    announced: bool = False
    saw_running: bool = False  # a run of this approval was under way while we waited


class Gate:
    """Holds calls until their request is decided (the pipeline's ``ApprovalGate`` ``hold``)."""

    def __init__(self, records: Records, notification: Notification, expiry: Expiry, decisions: Decisions,
                 claims: Claims, edits: Edits, page_url: str = "/approvals", redact: Redaction | None = None) -> None:
        self._records = records
        self._store = records.store
        self._clock = records.clock
        self._notification = notification
        self._expiry = expiry
        self._decisions = decisions
        self._claims = claims
        self._edits = edits
        self._page_url = page_url.rstrip("/")
        self._redact = redact  # applied to the arguments before a request is stored, listed or announced

    async def hold(self, held: HeldCall) -> ApprovalResult:
        """Wait for the decision on this call (see the module docstring)."""
        try:
            return await self._hold(held)
        except StoreUnavailable as exc:
            log.warning("call %s to %s refused: %s", held.request.call_id, held.request.tool, exc)
            return ApprovalResult(False, STORE_UNAVAILABLE, decision="store_unavailable")

    async def _hold(self, held: HeldCall) -> ApprovalResult:
        # REST callers say how long they wait (?wait=); an MCP call is held for the rule's ``hold``, then
        # answered "pending, call again" before the client's own read timeout gives up on it.
        wait = 0.0 if held.answer_now else held.request.wait_seconds
        if wait is None:
            wait = min((a.hold_seconds for a in held.decision.approvals), default=DEFAULT_APPROVAL_HOLD_SECONDS)
        deadline = self._clock() + wait
        for _ in range(APPROVAL_LOOKUP_ATTEMPTS):
            outcome = await self._hold_request(held, deadline)
            if isinstance(outcome, ApprovalResult):
                return outcome
            # A reload changed what the call needs while it waited: the request it waited on was set
            # aside, and the call now waits on one made for the current decision.
            held = replace(held, decision=outcome)
        raise StoreUnavailable("the call's approval request kept being set aside by policy reloads")

    async def _hold_request(self, held: HeldCall, deadline: float) -> ApprovalResult | Decision:
        approval = await self._find_or_create(held)
        elicit: Elicit | None = held.request.elicit
        if approval.state is not ApprovalState.PENDING or elicit is None or held.answer_now \
                or not any(r.asks_requester and r.satisfied_by is None for r in approval.requirements):
            return await self._await(approval.id, held, deadline)
        if held.request.wait_seconds is None:
            # The client declared elicitation and its user is being asked: the question is the client's
            # own UI, so the hold does not cut it short; the answer, an approver or the expiry ends the wait.
            deadline = max(deadline, approval.expires_ts)
        # Ask the end user while waiting, not before: an approver on the page, the timeout or the
        # caller's deadline must end the wait even if the user never answers.
        asking = asyncio.create_task(self._elicit(approval, held, elicit))
        try:
            return await self._await(approval.id, held, deadline)
        finally:
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)

    async def _find_or_create(self, held: HeldCall) -> Approval:
        """The request the call belongs to: the one its key finds, if that covers the call's requirements."""
        needed = requirements_of(held.decision)
        for _ in range(APPROVAL_LOOKUP_ATTEMPTS):
            found = await self._find(held)
            if found is not None and found.retired and set_aside_by(found) is not None:
                found = None  # one that no longer applied answers no call (a retry that came in meanwhile asks afresh)
            if found is None:
                approval = self._new_request(held, needed)
                found = await self._records.run(self._store.insert, approval)
                if found.id == approval.id:
                    log.info("approval %s created for %s (call %s)", approval.id, approval.tool, approval.call_id)
                    self._notification.notify("approval.created", approval)
                    return found
            missing = uncovered(found.requirements, needed)
            if not missing or found.state not in (ApprovalState.PENDING, ApprovalState.APPROVED):
                return found  # (one that ran, or was refused, keeps its outcome for every retry)
            await self._expiry.set_aside(found, missing)
        raise StoreUnavailable("the call's approval request kept changing under it")

    async def _find(self, held: HeldCall) -> Approval | None:
        request, upstream = held.request, held.tool.upstream.name
        digest = args_digest(held.decision.args)  # over the real arguments; the stored copy is made JSON-safe
        if request.call_id_given:
            return await self._records.run(self._store.find, request.principal.key, upstream, request.tool,
                                           request.call_id, digest)
        # No call id: a retry is the same principal, upstream, tool and final arguments in the same run; in
        # any of the principal's implicit runs when the client named none (a client may open a new MCP
        # session, and so get a new implicit run, for every call).
        run = "" if request.run_client is not None else request.session_id
        return await self._records.run(self._store.find_by_run, request.principal.key, upstream, run, request.tool,
                                       digest, request.received_ts)

    def _new_request(self, held: HeldCall, needed: list[Requirement]) -> Approval:
        request, decision = held.request, held.decision
        now = self._clock()
        timeout = min((a.timeout_seconds for a in decision.approvals), default=900.0)
        valid_for = min((a.valid_for_seconds for a in decision.approvals), default=DEFAULT_APPROVAL_VALID_SECONDS)
        on_timeout = "reject" if any(str(a.on_timeout) == "reject" for a in decision.approvals) else "allow"
        by_run = not request.call_id_given
        approval = Approval(
            id=uuid.uuid4().hex[:16], call_id=request.call_id, digest=args_digest(decision.args),
            principal=request.principal, session_id=request.session_id, tool=request.tool,
            original_args=json_safe(decision.original_args), final_args=json_safe(decision.args),
            requirements=needed, created_at=now_rfc3339(), expires_at=rfc3339(now + timeout),
            expires_ts=now + timeout, on_timeout=on_timeout, valid_for=valid_for, by_run=by_run,
            upstream=held.tool.upstream.name, across_runs=by_run and request.run_client is not None,
        )
        return approval.redacted(self._redact) if self._redact is not None else approval

    # -- waiting ----------------------------------------------------------------------------------

    async def _await(self, approval_id: str, held: HeldCall, deadline: float) -> ApprovalResult | Decision:
        """Look at the request until it answers the call (each look may wait for a change)."""
        waiting = _Waiting(held, deadline, self._clock() + APPROVAL_PROGRESS_SECONDS)
        while True:
            # Taken before reading the state, so no change from here on goes unnoticed (a change
            # signalled while the read is on the worker thread sets this very event).
            changed = self._notification.changed(approval_id)
            answer = await self._look(approval_id, changed, waiting)
            if answer is not None:
                return answer

    async def _look(self, approval_id: str, changed: asyncio.Event, waiting: _Waiting) -> Step:
        if (done := self._claims.outcome(approval_id)) is not None:
            return ApprovalResult(False, approval_id=approval_id, replay=done)
        approval = await self._records.run(self._store.get, approval_id)
        if approval is None:  # only if the database was changed under us
            return ApprovalResult(False, "The approval request disappeared.", approval_id)
        now = self._clock()
        if approval.state in FINAL_STATES:
            return await self._final(approval)
        if approval.state is ApprovalState.APPROVED:
            return await self._approved(approval, waiting, now)
        if approval.state is ApprovalState.EXECUTING:
            waiting.saw_running = True
            await self._running(approval, changed, now)
            return None
        return await self._pending(approval, changed, waiting, now)

    async def _final(self, approval: Approval) -> ApprovalResult:
        """The outcome of a request that ran, was denied or expired."""
        await self._told(approval)
        if approval.state is ApprovalState.EXECUTED:
            return ApprovalResult(False, approval_id=approval.id, replay=approval.result)
        if approval.state is ApprovalState.DENIED:
            return ApprovalResult(False, denial_message(approval), approval.id)
        return ApprovalResult(False, expired_message(approval), approval.id)

    async def _approved(self, approval: Approval, waiting: _Waiting, now: float) -> Step:
        """Claim an approved request for this caller's run, unless it no longer applies to the call."""
        if waiting.saw_running:  # the run we waited for never reached the upstream; this caller may retry
            return ApprovalResult(False, NOT_REACHED_WAITER, approval.id, decision="tool_failed")
        if await self._expiry.lapsed(approval, now):
            return None  # now expired: answered on the next look
        current = self._rechecked(approval, waiting.held)
        if isinstance(current, ApprovalResult):
            return current
        if current is not None:  # the policies now need approvers it did not have
            await self._expiry.set_aside(approval, uncovered(approval.requirements, requirements_of(current)))
            return current
        if await self._claims.claim(approval, now):
            # Edited by its approver: the edited call runs, if the policies still make the same of it (edits.py).
            return ApprovalResult(True, approval_id=approval.id) if approval.edit is None else \
                await self._edits.released(approval, waiting.held)
        return None  # another caller claimed it; wait for its result

    async def _running(self, approval: Approval, changed: asyncio.Event, now: float) -> None:
        """Wait on a request being run: every retry gets the one run's outcome, whatever its own wait.

        The run is bounded by the call timeout, and a run whose process died by its lease.
        """
        if approval.lease_ts is None or approval.lease_ts < now:
            await self._expiry.interrupt(approval, now)
            return
        await _wait(changed, max(0.01, min(APPROVAL_POLL_SECONDS, self._notification.poll, approval.lease_ts - now)))

    async def _pending(self, approval: Approval, changed: asyncio.Event, waiting: _Waiting, now: float) -> Step:
        """Wait on an undecided request until it changes, expires, or the caller's deadline; send progress."""
        if now >= approval.expires_ts:
            await self._expiry.expire(approval)
            return None
        if now >= waiting.deadline:
            return ApprovalResult(False, pending_message(approval, self._page_url), approval.id, pending=True,
                                  decision="pending", expires_at=approval.expires_at)
        progress = waiting.held.request.progress
        if not waiting.announced and progress is not None:
            waiting.announced = True
            await self._progress(waiting.held, approval)
        limits = [approval.expires_ts - now, waiting.next_progress - now, waiting.deadline - now,
                  self._notification.poll]
        if not await _wait(changed, max(0.01, min(limits))) and progress and self._clock() >= waiting.next_progress:
            waiting.next_progress = self._clock() + APPROVAL_PROGRESS_SECONDS
            await self._progress(waiting.held, approval)
        return None

    def _rechecked(self, approval: Approval, held: HeldCall) -> ApprovalResult | Decision | None:
        """Before a claim: the call decided by the policies in force now (a reload may have come since it was
        held). None: the approval covers it; a refusal: they no longer hold it for this approval; a decision
        whose requirements the approval does not cover."""
        if held.recheck is None:
            return None
        current = held.recheck()
        if current is held.decision:
            return None
        if current.verdict is not Verdict.APPROVE or args_digest(current.args) != approval.digest:
            return ApprovalResult(False, POLICIES_CHANGED, approval.id, decision="reject")
        return current if uncovered(approval.requirements, requirements_of(current)) else None

    async def _told(self, approval: Approval) -> None:
        """A caller is being given this request's outcome: a request bound by its run lets go of its key,
        so the next identical call in the run is a new decision."""
        if not approval.retired and (approval.by_run or lapse_of(approval) is not None):
            await self._records.run(self._store.retire, approval.id)

    async def _progress(self, held: HeldCall, approval: Approval) -> None:
        assert held.request.progress is not None
        left = max(0, int(approval.expires_ts - self._clock()))
        try:
            await held.request.progress(
                f"Waiting for approval {approval.id} ({left}s left): {self._page_url}/{approval.id}")
        except Exception as exc:  # a gone client must not lose the approval
            log.info("progress for approval %s not delivered: %s", approval.id, exc)

    async def _elicit(self, approval: Approval, held: HeldCall, elicit: Elicit) -> None:
        message = "; ".join(r.message for r in approval.requirements if r.asks_requester) or \
            f"Allow the call to {approval.tool}?"
        arguments = json.dumps(approval.final_args, ensure_ascii=False)
        answer = await elicit(f"{message}\nTool: {approval.tool}\nArguments: {arguments}")
        if answer is None:
            return  # the client cannot ask; the page remains
        voter = Principal(f"{END_USER}{held.request.principal.id}", ())
        try:
            await self._decisions.decide(approval.id, voter, answer, "via MCP elicitation", elicitation=True)
        except (ApprovalConflict, ApprovalForbidden, StoreUnavailable):
            pass  # decided (or expired) meanwhile on the page; a locked database leaves the page


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` was set within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
        return True
    except TimeoutError:
        return False


