"""Hold calls for people to decide, exactly once.

``hold`` is the ``ApprovalGate`` the pipeline calls when the verdict is approve. It finds or
creates the request bound to (principal, upstream, exposed tool, call id, digest of the final
arguments) — without a call id, to the run instead, or to no run for an implicit one (see
``model.Binding``) — whose requirements cover the call's. A request found with requirements that do
not (the policies now need other approvers) is set aside, and the call asks afresh; so is one found
approved when the call, decided again by the policies in force at the claim, needs more. It then
waits — sending progress — until the request is decided, expires, or the caller stops waiting.
An approved request is claimed (approved → executing) by exactly one caller, within its
``valid_for``; everyone else, now or after a restart, waits for and gets the stored result of that
one execution.

A claim names the gateway process that made it and holds a lease, renewed while the call runs.
Only a claim whose lease ran out (its process died) is marked "interrupted", so a second gateway
on the same database never touches the first one's running calls. A run that provably never
reached the upstream (``released``) gives the approval back for a retry.

Every database access runs on the store's worker thread (the store's ``run``): a locked file
delays the callers that need it, never the event loop, and ends in ``StoreUnavailable``, which
callers get as a clear refusal.

A decision made through another process (another worker, another replica) wakes the held call too:
on PostgreSQL through LISTEN/NOTIFY (``watch``), on SQLite because a held call re-reads its request
every ``APPROVAL_SHARED_POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from gateway.approvals.model import (
    POLICY_CHANGE,
    Approval,
    ApprovalState,
    Requirement,
    Vote,
    args_digest,
    json_safe,
    qualifies,
    rfc3339,
    seen_as,
    uncovered,
)
from gateway.approvals.store import ApprovalStore, ListFilter
from gateway.core.audit_head import audit_head
from gateway.core.errors import ApprovalConflict, ApprovalForbidden, ApprovalNotFound, StoreUnavailable
from gateway.core.limits import (
    APPROVAL_HEARTBEAT_SECONDS,
    APPROVAL_LEASE_SECONDS,
    APPROVAL_LOOKUP_ATTEMPTS,
    APPROVAL_NOTIFY_FALLBACK_SECONDS,
    APPROVAL_POLL_SECONDS,
    APPROVAL_PROGRESS_SECONDS,
    APPROVAL_RESULT_RETRY_SECONDS,
    APPROVAL_SHARED_POLL_SECONDS,
    APPROVAL_SWEEP_SECONDS,
    DEFAULT_APPROVAL_HOLD_SECONDS,
    DEFAULT_APPROVAL_VALID_SECONDS,
)
from gateway.observe.tracing import current_trace_id
from gateway.pipeline.approvals import ApprovalResult, HeldCall
from gateway.policy.call import Principal
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.policy.decision import Decision, Verdict
from gateway.store.model import now_rfc3339

__all__ = ["STORE_UNAVAILABLE", "ApprovalService", "Notifier"]

log = logging.getLogger("gateway.approvals")

T = TypeVar("T")

# Votes cast by the end user through MCP elicitation are recorded under this prefix.
END_USER = "end-user:"

# An elicitation callback: ask the end user; True accept, False decline, None cannot ask.
Elicit = Callable[[str], Awaitable[bool | None]]

STORE_UNAVAILABLE = ("The approval could not be read or recorded (the gateway's database is busy), so the call "
                     "was not run. Try again shortly.")
POLICIES_CHANGED = ("The policies changed while this call waited for its approval, so it was not run. Call again "
                    "with the same arguments: the policies in force now decide it.")
NOT_REACHED_WAITER = ("The approved call was tried, but its service could not be reached, so it was not sent. "
                      "The approval is still valid: call again to run it.")


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
                 clock: Callable[[], float] = time.time, redact: Callable[[Any], Any] | None = None, *,
                 lease_seconds: float = APPROVAL_LEASE_SECONDS, heartbeat_seconds: float = APPROVAL_HEARTBEAT_SECONDS,
                 audit: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.store = store
        self._audit = audit  # the audit log's writer, for what happens with no call in flight (a lapse)
        self._redact = redact  # applied to the arguments before a request is stored, listed or announced
        self.notifier = notifier
        self.page_url = page_url.rstrip("/")
        self.instance_id = store.instance_id
        self._clock = clock
        self._lease = lease_seconds
        self._heartbeat = heartbeat_seconds
        self._changed: dict[str, asyncio.Event] = {}
        self._heartbeats: dict[str, asyncio.Task[None]] = {}
        # Results of runs in this process not yet stored (the database was locked): waiters get them here.
        self._outcomes: dict[str, dict[str, Any]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._poll = APPROVAL_SHARED_POLL_SECONDS  # until ``watch`` finds the database pushes changes

    def watch(self) -> None:
        """Wake held calls when another process changes their request (call once, on the event loop)."""
        loop = asyncio.get_running_loop()

        def woken(approval_id: str) -> None:  # on the store's listening thread
            loop.call_soon_threadsafe(self._woken, approval_id)

        if self.store.listen(woken):
            self._poll = APPROVAL_NOTIFY_FALLBACK_SECONDS

    def _woken(self, approval_id: str) -> None:
        if approval_id:
            self._signal(approval_id)
            return
        for waiting in list(self._changed):  # (re)connected: anything may have changed
            self._signal(waiting)

    async def _db(self, work: Callable[..., T], *args: Any) -> T:
        """Run one store method on the store's worker thread."""
        try:
            return await self.store.run(work, *args)
        except RuntimeError as exc:  # the worker was shut down: the gateway is stopping
            raise StoreUnavailable(f"the approvals database is closed ({exc})") from exc

    # -- the gate -------------------------------------------------------------------------------

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
            held = HeldCall(held.request, held.tool, outcome, held.recheck, held.answer_now)
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
        needed = _requirements(held.decision)
        for _ in range(APPROVAL_LOOKUP_ATTEMPTS):
            found = await self._find(held)
            if found is not None and found.retired and _set_aside_by(found) is not None:
                found = None  # one that no longer applied answers no call (a retry that came in meanwhile asks afresh)
            if found is None:
                approval = self._new_request(held, needed)
                found = await self._db(self.store.insert, approval)
                if found.id == approval.id:
                    log.info("approval %s created for %s (call %s)", approval.id, approval.tool, approval.call_id)
                    self._notify("approval.created", approval)
                    return found
            missing = uncovered(found.requirements, needed)
            if not missing or found.state not in (ApprovalState.PENDING, ApprovalState.APPROVED):
                return found  # (one that ran, or was refused, keeps its outcome for every retry)
            await self._set_aside(found, missing)
        raise StoreUnavailable("the call's approval request kept changing under it")

    async def _find(self, held: HeldCall) -> Approval | None:
        request, upstream = held.request, held.tool.upstream.name
        digest = args_digest(held.decision.args)  # over the real arguments; the stored copy is made JSON-safe
        if request.call_id_given:
            return await self._db(self.store.find, request.principal.id, upstream, request.tool, request.call_id,
                                  digest)
        # No call id: a retry is the same principal, upstream, tool and final arguments in the same run; in
        # any of the principal's implicit runs when the client named none (a client may open a new MCP
        # session, and so get a new implicit run, for every call).
        run = "" if request.run_client is not None else request.session_id
        return await self._db(self.store.find_by_run, request.principal.id, upstream, run, request.tool, digest,
                              request.received_ts)

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

    async def _set_aside(self, approval: Approval, missing: list[Requirement]) -> None:
        """Expire an undecided or unused request that does not cover the call's current requirements, and free
        its key (if someone else changed it first, the caller finds what they made of it when it looks again)."""
        expected = approval.state
        reason = "the policies now need approval by " + "; ".join(
            f"{r.rule}: {', '.join(r.approvers) or 'any approver'}" for r in missing)
        approval.state, approval.retired, approval.owner, approval.lease_ts = ApprovalState.EXPIRED, True, None, None
        approval.votes.append(Vote(POLICY_CHANGE, [], False, reason, now_rfc3339()))
        approval.decided_at = approval.decided_at or approval.votes[-1].at
        if await self._db(self.store.transition, approval, expected):
            self._signal(approval.id)
            self._notify("approval.expired", approval)
            self._audit_event("approval.superseded", approval, reason=reason)
            log.info("approval %s set aside: %s", approval.id, reason)

    async def _await(self, approval_id: str, held: HeldCall, deadline: float) -> ApprovalResult | Decision:
        announced = False
        saw_running = False  # a run of this approval was under way while we waited
        next_progress = self._clock() + APPROVAL_PROGRESS_SECONDS
        while True:
            # Taken before reading the state, so no change from here on goes unnoticed (a change
            # signalled while the read is on the worker thread sets this very event).
            changed = self._changed.setdefault(approval_id, asyncio.Event())
            if (done := self._outcomes.get(approval_id)) is not None:
                return ApprovalResult(False, approval_id=approval_id, replay=done)
            approval = await self._db(self.store.get, approval_id)
            if approval is None:  # only if the database was changed under us
                return ApprovalResult(False, "The approval request disappeared.", approval_id)
            state, now = approval.state, self._clock()
            if state is ApprovalState.EXECUTED:
                await self._told(approval)
                return ApprovalResult(False, approval_id=approval_id, replay=approval.result)
            if state is ApprovalState.DENIED:
                await self._told(approval)
                return ApprovalResult(False, _denial_message(approval), approval_id)
            if state is ApprovalState.EXPIRED:
                await self._told(approval)
                return ApprovalResult(False, _expired_message(approval), approval_id)
            if state is ApprovalState.APPROVED:
                if saw_running:  # the run we waited for never reached the upstream; this caller may retry
                    return ApprovalResult(False, NOT_REACHED_WAITER, approval_id, decision="tool_failed")
                if await self._lapsed(approval, now):
                    continue  # now expired: answered above on the next pass
                current = self._rechecked(approval, held)
                if isinstance(current, ApprovalResult):
                    return current
                if current is not None:  # the policies now need approvers it did not have
                    await self._set_aside(approval, uncovered(approval.requirements, _requirements(current)))
                    return current
                if await self._claim(approval, now):
                    self._start_heartbeat(approval_id)
                    return ApprovalResult(True, approval_id=approval_id)
                continue  # another caller claimed it; wait for its result
            if state is ApprovalState.EXECUTING:
                # Every retry gets the one run's outcome, whatever its own wait: the run is bounded
                # by the call timeout, and a run whose process died by its lease.
                saw_running = True
                if approval.lease_ts is None or approval.lease_ts < now:
                    await self._interrupt(approval, now)
                    continue
                await _wait(changed, max(0.01, min(APPROVAL_POLL_SECONDS, self._poll, approval.lease_ts - now)))
                continue
            if state is ApprovalState.PENDING and now >= approval.expires_ts:
                await self.expire(approval)
                continue
            if now >= deadline:
                return ApprovalResult(False, self._pending_message(approval), approval_id, pending=True,
                                      decision="pending", expires_at=approval.expires_at)
            if not announced and held.request.progress is not None:
                announced = True
                await self._progress(held, approval)
            limits = [approval.expires_ts - now, next_progress - now, deadline - now, self._poll]
            if not await _wait(changed, max(0.01, min(limits))) and held.request.progress \
                    and self._clock() >= next_progress:
                next_progress = self._clock() + APPROVAL_PROGRESS_SECONDS
                await self._progress(held, approval)

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
        return current if uncovered(approval.requirements, _requirements(current)) else None

    def _pending_message(self, approval: Approval) -> str:
        """What the model reads when the hold is over: not run yet, which request, until when, what to do."""
        return (f"Approval pending: this call to {approval.tool} needs a person's approval and has not run yet "
                f"(approval request {approval.id}, {self.page_url}/{approval.id}; it expires at "
                f"{approval.expires_at}). To get the outcome, call {approval.tool} again with exactly the same "
                "arguments: once approved, that call runs it (once); if it was denied or expired, that call says so.")

    async def _told(self, approval: Approval) -> None:
        """A caller is being given this request's outcome: a request bound by its run lets go of its key,
        so the next identical call in the run is a new decision."""
        if not approval.retired and (approval.by_run or _lapse_of(approval) is not None):
            await self._db(self.store.retire, approval.id)

    async def _claim(self, approval: Approval, now: float) -> bool:
        """approved → executing, owned by this process under a lease; False if another caller won."""
        approval.state, approval.owner, approval.lease_ts = ApprovalState.EXECUTING, self.instance_id, now + self._lease
        claiming = asyncio.ensure_future(self._db(self.store.transition, approval, ApprovalState.APPROVED))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            # The caller left while the claim was being written: nothing will run, so give it back.
            claiming.add_done_callback(lambda done: self._give_back(approval.id, done))
            raise

    def _give_back(self, approval_id: str, claiming: asyncio.Future[bool]) -> None:
        if claiming.cancelled() or claiming.exception() is not None or not claiming.result():
            return
        task = asyncio.ensure_future(self.released(approval_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _lapsed(self, approval: Approval, now: float, *, retire: bool = True) -> bool:
        """Expire an approved request that may no longer be used; True if it was (or someone else did).

        A caller finding it retires it at once (it is told so now); the sweeper leaves it holding its key
        until the agent's next identical call is told "expired unused" (see ``_told``).
        """
        valid_until = approval.valid_until_ts
        late_vote = approval.decided_ts is not None and approval.decided_ts > approval.expires_ts and \
            not any(v.approver == "timeout" for v in approval.votes)
        if not late_vote and (valid_until is None or now <= valid_until):
            return False
        approval.state, approval.retired = ApprovalState.EXPIRED, retire
        reason = "approved after the request expired" if late_vote else \
            f"approved, but not used within {_duration(approval.valid_for)}"
        approval.votes.append(Vote("validity", [], False, reason, now_rfc3339()))
        if await self._db(self.store.transition, approval, ApprovalState.APPROVED):
            self._signal(approval.id)
            self._notify("approval.expired", approval)
            self._audit_event("approval.lapsed", approval, reason=reason)
            log.info("approval %s lapsed: %s", approval.id, reason)
        return True

    def _audit_event(self, event: str, approval: Approval, **fields: Any) -> None:
        """Write an event about a request to the audit log; a failed write is logged (the state change stands)."""
        if self._audit is None:
            return
        try:
            self._audit({**audit_head(event, now_rfc3339(), current_trace_id()), "approval_id": approval.id,
                         "principal": {"id": approval.principal.id, "groups": list(approval.principal.groups)},
                         "session": approval.session_id, "tool": approval.tool, "state": str(approval.state),
                         "decided_at": approval.decided_at, "execution": approval.execution(), **fields})
        except Exception as exc:  # an audit failure must not stop the sweeper
            log.error("approval %s: %s not audited: %s", approval.id, event, exc)

    async def _progress(self, held: HeldCall, approval: Approval) -> None:
        assert held.request.progress is not None
        left = max(0, int(approval.expires_ts - self._clock()))
        try:
            await held.request.progress(
                f"Waiting for approval {approval.id} ({left}s left): {self.page_url}/{approval.id}")
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
            await self._record(approval.id, voter, answer, "via MCP elicitation", elicitation=True)
        except (ApprovalConflict, ApprovalForbidden, StoreUnavailable):
            pass  # decided (or expired) meanwhile on the page; a locked database leaves the page

    # -- the one run --------------------------------------------------------------------------------

    def _start_heartbeat(self, approval_id: str) -> None:
        self._heartbeats[approval_id] = asyncio.create_task(self._renew(approval_id),
                                                            name=f"approval-lease-{approval_id}")

    def _stop_heartbeat(self, approval_id: str) -> None:
        task = self._heartbeats.pop(approval_id, None)
        if task is not None:
            task.cancel()

    async def _renew(self, approval_id: str) -> None:
        """Keep this process's claim alive while the call runs (and while its result waits to be stored)."""
        while True:
            await asyncio.sleep(self._heartbeat)
            try:
                if not await self._db(self.store.renew, approval_id, self.instance_id, self._clock() + self._lease):
                    return  # settled, or taken over after the lease ran out
            except StoreUnavailable as exc:
                log.warning("approval %s: lease not renewed: %s", approval_id, exc)

    async def executed(self, approval_id: str, result: dict[str, Any]) -> None:
        """Store the one execution's result, for every retry of the call (retried while the database is locked)."""
        self._outcomes[approval_id] = result
        self._signal(approval_id)

        def settle(approval: Approval) -> None:
            approval.state, approval.result, approval.executed_at = ApprovalState.EXECUTED, result, now_rfc3339()
            # The caller that ran it is given this outcome now: a run-bound request lets go of its key.
            approval.retired = approval.retired or approval.by_run

        await self._settle(approval_id, settle, "result")

    async def released(self, approval_id: str) -> None:
        """The run never reached the upstream: the approval is usable again (within its validity)."""

        def settle(approval: Approval) -> None:
            approval.state = ApprovalState.APPROVED

        await self._settle(approval_id, settle, "release")

    async def _settle(self, approval_id: str, change: Callable[[Approval], None], what: str) -> None:
        try:
            await self._end_claim(approval_id, change)
        except StoreUnavailable as exc:
            log.warning("approval %s: %s not stored yet, retrying: %s", approval_id, what, exc)
            task = asyncio.create_task(self._end_claim_later(approval_id, change), name=f"approval-{what}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _end_claim(self, approval_id: str, change: Callable[[Approval], None]) -> None:
        """Apply ``change`` to this process's claim and drop the claim; a claim no longer ours is left alone."""
        approval = await self._db(self.store.get, approval_id)
        if approval is not None and approval.state is ApprovalState.EXECUTING and approval.owner == self.instance_id:
            change(approval)
            approval.owner, approval.lease_ts = None, None
            await self._db(self.store.transition, approval, ApprovalState.EXECUTING, self.instance_id)
        self._stop_heartbeat(approval_id)
        self._outcomes.pop(approval_id, None)
        self._signal(approval_id)

    async def _end_claim_later(self, approval_id: str, change: Callable[[Approval], None]) -> None:
        while True:
            await asyncio.sleep(APPROVAL_RESULT_RETRY_SECONDS)
            try:
                await self._end_claim(approval_id, change)
                log.info("approval %s: stored after the database came back", approval_id)
                return
            except StoreUnavailable:
                continue

    async def _interrupt(self, approval: Approval, now: float) -> None:
        """Mark a claim whose lease ran out: its process died mid-run, so the call may or may not have run."""
        approval.state = ApprovalState.EXECUTED
        approval.result = _refusal(
            approval.call_id, "interrupted",
            "The approved call was interrupted (the gateway running it stopped); it may or may not have taken effect.",
            approval.id)
        owner, approval.owner, approval.lease_ts = approval.owner, None, None
        if await self._db(self.store.interrupt, approval, now):
            log.warning("approval %s: the run claimed by gateway %s was abandoned; marked interrupted",
                        approval.id, owner)
            self._signal(approval.id)

    async def orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        """A retry of an approved call whose tool is gone: the stored result, or "no longer available".

        A still-pending request is left as it is (the tool may come back before it is decided).
        """
        try:
            return await self._orphaned(principal_id, call_id, tool)
        except StoreUnavailable as exc:
            log.warning("call %s to %s refused: %s", call_id, tool, exc)
            return _refusal(call_id, "store_unavailable", STORE_UNAVAILABLE, None)

    async def _orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        for approval in await self._db(self.store.for_call, principal_id, call_id, tool):
            if approval.upstream == CLIENT_UPSTREAM:
                continue  # an agent-run tool never leaves a registry: it is not the gone tool of this call
            if approval.state is ApprovalState.EXECUTED and approval.result is not None:
                return approval.result
            if approval.state is ApprovalState.APPROVED:
                approval.state, approval.owner, approval.lease_ts = ApprovalState.EXECUTING, self.instance_id, \
                    self._clock() + self._lease
                if await self._db(self.store.transition, approval, ApprovalState.APPROVED):
                    result = _refusal(call_id, "tool_unavailable",
                                      f"The tool {tool} is no longer available, so the approved call was not run.",
                                      approval.id)
                    await self.executed(approval.id, result)
                    return result
            if approval.state is ApprovalState.DENIED:
                return _refusal(call_id, "reject", _denial_message(approval), approval.id)
        return None

    async def recover(self) -> int:
        """At start: mark runs whose claim's lease ran out (their process died) as interrupted.

        Claims still under a live lease belong to another running gateway on this database and
        are left alone. Returns how many were marked; their tools may or may not have run, so
        they are not run again.
        """
        now = self._clock()
        stale = await self._db(self.store.abandoned, now)
        for approval in stale:
            await self._interrupt(approval, now)
        return len(stale)

    # -- approvers --------------------------------------------------------------------------------

    async def get(self, approval_id: str) -> Approval | None:
        """One request by id."""
        return await self._db(self.store.get, approval_id)

    async def listing(self, which: ListFilter, limit: int, offset: int) -> tuple[list[Approval], int]:
        """One page of requests (newest first) and how many match."""
        return await self._db(self.store.list_requests, None, limit, offset, which)

    @staticmethod
    def audience(approver: Principal, admin: bool) -> tuple[str, ...] | None:
        """The listing filter for what ``approver`` may see: None (everything) for an admin."""
        return None if admin else tuple(seen_as(approver))

    @staticmethod
    def may_see(approval: Approval, approver: Principal, admin: bool) -> bool:
        """An admin sees every request; an approver those some requirement lets them decide."""
        return admin or any(qualifies(approver, r.approvers) for r in approval.requirements)

    async def decide(self, approval_id: str, approver: Principal, approve: bool, comment: str = "") -> Approval:
        """Record an approver's decision; raises 404/403/409-mapped errors (503 if the database is locked)."""
        return await self._record(approval_id, approver, approve, comment)

    async def _record(self, approval_id: str, approver: Principal, approve: bool, comment: str,
                      *, elicitation: bool = False) -> Approval:
        approval = await self._db(self.store.get, approval_id)
        if approval is None:
            raise ApprovalNotFound(f"no approval request {approval_id}")
        if approval.state is ApprovalState.PENDING and self._clock() >= approval.expires_ts:
            await self.expire(approval)
            raise ApprovalConflict(f"approval {approval_id} expired at {approval.expires_at}; "
                                   "a decision after that is not accepted")
        if approval.state is not ApprovalState.PENDING:
            raise ApprovalConflict(f"approval {approval_id} is already {approval.state}")
        if not elicitation and approver.id == approval.principal.id:
            raise ApprovalForbidden("you cannot approve your own call")
        # The requester's own client answers only for a requirement that names the requester (``self``).
        open_reqs = [r for r in approval.requirements if r.satisfied_by is None
                     and (r.asks_requester if elicitation else qualifies(approver, r.approvers))]
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
            approval.decided_at, approval.decided_ts = vote.at, self._clock()
        if not await self._db(self.store.transition, approval, ApprovalState.PENDING):
            raise ApprovalConflict(f"approval {approval_id} was decided by someone else just now")
        self._signal(approval_id)
        if approval.state is not ApprovalState.PENDING:
            self._notify("approval.decided", approval)
        return approval

    async def expire(self, approval: Approval) -> None:
        """Apply the request's on_timeout: expired (reject) or approved (allow)."""
        if approval.state is not ApprovalState.PENDING:
            return
        allow = approval.on_timeout == "allow"
        approval.state = ApprovalState.APPROVED if allow else ApprovalState.EXPIRED
        approval.decided_at, approval.decided_ts = now_rfc3339(), self._clock()
        approval.votes.append(Vote("timeout", [], allow, f"expired; on_timeout {approval.on_timeout}",
                                   approval.decided_at))
        if await self._db(self.store.transition, approval, ApprovalState.PENDING):
            self._signal(approval.id)
            self._notify("approval.expired", approval)

    def _notify(self, event: str, approval: Approval) -> None:
        if self.notifier is not None:
            self.notifier.notify(event, approval)

    async def aclose(self) -> None:
        """Stop lease renewals and retries, and let webhook deliveries in flight finish (briefly)."""
        for task in [*self._heartbeats.values(), *self._background]:
            task.cancel()
        await asyncio.gather(*self._heartbeats.values(), *self._background, return_exceptions=True)
        self._heartbeats.clear()
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
        """Expire requests nobody is waiting on, and mark abandoned runs; runs until cancelled."""
        while True:
            try:
                now = self._clock()
                for approval in await self._db(self.store.due, now):
                    await self.expire(approval)
                for approval in await self._db(self.store.in_state, ApprovalState.APPROVED):
                    await self._lapsed(approval, now, retire=False)  # approved, never called again: expired unused
                for approval in await self._db(self.store.abandoned, now):
                    await self._interrupt(approval, now)
            except StoreUnavailable as exc:  # try again next time; the sweeper must not die
                log.warning("approval sweep skipped: %s", exc)
            await asyncio.sleep(interval)


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` was set within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
        return True
    except TimeoutError:
        return False


def _denial_message(approval: Approval) -> str:
    vote = next((v for v in reversed(approval.votes) if not v.approve), None)
    if vote is not None and vote.approver.startswith(END_USER):
        return "The user declined this call."
    comment = vote.comment if vote else ""
    return f"Denied by an approver: {comment}" if comment else "Denied by an approver."


def _requirements(decision: Decision) -> list[Requirement]:
    """The requirements of a decision to approve, as a request records them (none satisfied yet)."""
    return [Requirement(a.rule, a.message or decision.message or "", list(a.approvers), None, a.via)
            for a in decision.approvals]


def _lapse_of(approval: Approval) -> Vote | None:
    """The record of an approval that expired unused (or was given too late), if it did."""
    return next((v for v in approval.votes if v.approver == "validity"), None)


def _set_aside_by(approval: Approval) -> Vote | None:
    """The record of a request set aside because the policies came to need other approvers, if it was."""
    return next((v for v in approval.votes if v.approver == POLICY_CHANGE), None)


def _expired_message(approval: Approval) -> str:
    set_aside = _set_aside_by(approval)
    if set_aside is not None:
        return (f"Approval {approval.id} no longer applies ({set_aside.comment}), so the call was not run. "
                "Call again with the same arguments to ask for the approval needed now.")
    if _lapse_of(approval) is None:
        return "Nobody approved this call in time, so it was not run."
    if approval.decided_ts is not None and approval.decided_ts > approval.expires_ts and \
            not any(v.approver == "timeout" for v in approval.votes):
        return f"Approval {approval.id} was given after the request had expired, so the call was not run. " \
            "Call again to ask for a new approval."
    return (f"Approval {approval.id} was valid for {_duration(approval.valid_for)} after it was given and "
            "has expired unused, so the call was not run. Call again to ask for a new approval.")


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    return f"{whole // 60}m" if whole % 60 == 0 else f"{whole}s"


def _refusal(call_id: str, decision: str, message: str, approval_id: str | None) -> dict[str, Any]:
    """A refusal in the stored-outcome shape (what CallOutcome.to_rest gives)."""
    meta = {"gateway/call_id": call_id, "gateway/decision": decision}
    if approval_id is not None:
        meta["gateway/approval_id"] = approval_id
    return {"call_id": call_id, "decision": decision, "is_error": True,
            "content": [{"type": "text", "text": message}], "structured": None, "meta": meta}
