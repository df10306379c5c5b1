"""The life of one call, in order. Each step is a method of ``Gateway`` or a call into a module of its own.

    per-principal limits → admit the values (policies must see exactly what the tool gets) → the run's
    session (a terminated run ends here) → resolve tool → admit the caller (an upstream that acts on its
    caller's behalf needs a caller with a verified token) → check the values sent (size; what the client
    must answer; the input schema's types and ranges: what policies read) → request-stage policies
    (mutate, validate; a call a tally counts is decided and counted inside the store's admission, on the
    tallies read under its lock) → check the final args against the tool's input schema (what a rewrite
    may mend: missing or extra arguments) → approval (the gate; held on a connection only within the
    principal's held-call share, else answered pending at once; once released, admitted again on the
    tallies then; an approver's edit, decided again, runs in place of the call as asked) → upstream with a
    timeout (its intent on record, then its request-stage labels added to the run) → admit the result's
    values → response-stage policies (their labels added) → the frontend's result → audit event (what the
    call added to the run) → session counters and history

``Gateway.call`` runs every step. ``Gateway.decide`` runs the same steps for a call its caller runs itself
(the model proxy's agent-run tools): in place of the upstream step the call is handed out, its intent on
record, and an admitted outcome carries the arguments to run it with. Nothing is executed.

Every call gets exactly one outcome paired with its call id; a tool that is not exposed is the
only case that raises (``UnknownToolError``, which frontends turn into a protocol error).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gateway.core.clock import now_rfc3339
from gateway.core.errors import AuditWriteError, StoreUnavailable, UnknownToolError
from gateway.core.values import printable, problem, shown_id
from gateway.observe.observer import CallObserver
from gateway.observe.tracing import current_trace_id
from gateway.pipeline.admission import input_problem, no_token_refusal
from gateway.pipeline.approvals import ApprovalGate, HeldCall, NoApprovals, ReleasedEdit
from gateway.pipeline.audit import AuditLog
from gateway.pipeline.call_events import outcome_event
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.deciding import evaluate, request_stage_call
from gateway.pipeline.edits import redecider, released, with_note
from gateway.pipeline.execution import Execution
from gateway.pipeline.flow_step import admitted, readmitted, record_history, usage_now
from gateway.pipeline.principal_limits import PrincipalLimits
from gateway.pipeline.questions import Questions
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.results import (
    APPROVAL_KEPT,
    AUDIT_FAILED,
    AUDIT_FAILED_AFTER_RUN,
    INTERRUPTED,
    META,
    NOT_REACHED,
    STORE_UNAVAILABLE,
    TOOL_FAILED,
    UNHELD,
    handed_out,
    needs_client,
    pending,
    refusal,
    schema_refusal,
    unavailable,
)
from gateway.pipeline.run_end import terminated_text
from gateway.pipeline.settings import CallSettings
from gateway.pipeline.verdicts import stopped
from gateway.policy.call import ToolCall
from gateway.policy.decision import Decision, Verdict
from gateway.policy.policyset import PolicySet
from gateway.reload.holder import PolicyHolder
from gateway.store.base import SessionStore
from gateway.store.model import SessionState
from gateway.upstreams.client_requests import undeclared
from gateway.upstreams.registry import ExposedTool, ToolRegistry

__all__ = ["AUDIT_FAILED", "AUDIT_FAILED_AFTER_RUN", "TOOL_FAILED", "CallSettings", "Gateway"]

log = logging.getLogger("gateway.pipeline")

# The last step of a call that may run: the upstream (``call``) or the hand-out (``decide``).
_Run = Callable[[CallTrace, ExposedTool, PolicySet, ToolCall, Decision], Awaitable[CallOutcome]]

_REFUSED = frozenset({"reject", "terminate", "invalid_arguments", "terminated"})
_OUTCOME_FIELDS = ("call_id", "decision", "is_error", "content", "structured", "meta")


class _Ended(Exception):
    """A step ended the call with ``outcome`` (``counted``: whether it is one of the run's calls)."""

    def __init__(self, outcome: CallOutcome, *, counted: bool = True) -> None:
        super().__init__(outcome.decision)
        self.outcome, self.counted = outcome, counted


class Gateway(Questions):
    """Runs calls through policies to upstreams; one instance per process."""

    def __init__(self, policies: PolicyHolder, registry: ToolRegistry, store: SessionStore, audit: AuditLog,
                 settings: CallSettings | None = None, *, approvals: ApprovalGate | None = None,
                 limits: PrincipalLimits | None = None, observer: CallObserver | None = None) -> None:
        self.policies = policies
        self.registry = registry
        self.store = store
        self.audit = audit
        self.settings = settings or CallSettings()
        self.approvals: ApprovalGate = approvals or NoApprovals()
        self.limits = limits or PrincipalLimits()
        self.observer = observer or CallObserver()  # metrics and traces (gateway/observe)
        self._execution = Execution(audit, store, self.observer, self.settings.call_timeout)
        self._running: set[asyncio.Future[CallOutcome]] = set()

    @property
    def env(self) -> dict[str, Any]:
        """CEL's ``env`` for every call."""
        return self.settings.env

    @property
    def call_timeout(self) -> float:
        """How long an upstream call may take, unless the call or its upstream says otherwise."""
        return self.settings.call_timeout

    async def call_batch(self, requests: Sequence[CallRequest]) -> list[CallOutcome]:
        """A whole model turn: one outcome per call id, in order (a terminate refuses the rest)."""
        outcomes = []
        for request in requests:
            try:
                outcomes.append(await self.call(request))
            except UnknownToolError as exc:
                outcomes.append(refusal(request.call_id, "unknown_tool", str(exc)))
        return outcomes

    async def call(self, request: CallRequest) -> CallOutcome:
        """Carry out one call: every step of the module docstring."""
        return await self.observer.call(request, self._call(request, hand_out=False), self.registry)

    async def decide(self, request: CallRequest) -> CallOutcome:
        """Decide a call its caller runs itself, executing nothing: the admitted outcome's ``admitted`` holds the
        arguments to run it with (the model proxy's agent-run tools, carried in ``request.exposed``)."""
        return await self.observer.call(request, self._call(request, hand_out=True), self.registry)

    # --- the steps, in order ------------------------------------------------------------------------------

    async def _call(self, request: CallRequest, *, hand_out: bool) -> CallOutcome:
        trace = CallTrace(request, current_trace_id(), hand_out, self.settings.env_revision)
        policy_set = self.policies.current  # one revision for the whole call
        exceeded = self.limits.acquire(request.principal.key)
        if exceeded is not None:
            outcome = refusal(printable(request.call_id), "rate_limited", exceeded.message,
                              retry_after=exceeded.retry_after)
            return self._finish(trace, outcome, policy_set)
        try:
            return await self._steps(trace, policy_set, self._execution.hand_out if hand_out else self._execution.run)
        finally:
            self.limits.release(request.principal.key)
            await self.store.settle()  # with other processes on the store: its counts written before it answers

    async def _steps(self, trace: CallTrace, policy_set: PolicySet, run: _Run) -> CallOutcome:
        counted = True
        try:
            self._admit_values(trace)
            session = await self._open_session(trace)
            tool = await self._resolve_tool(trace, policy_set)
            self._admit_caller(trace, tool)
            self._check_values_sent(trace, tool)
            call, decision = await self._request_stage(trace, tool, session, policy_set)
            self._check_final_args(trace, tool, decision)
            if decision.verdict is Verdict.APPROVE:
                outcome = await self._approve_then_run(trace, tool, policy_set, call, decision, run)
            else:
                outcome = await run(trace, tool, policy_set, call, decision)
        except _Ended as ended:
            outcome, counted = ended.outcome, ended.counted
        return self._finish(trace, outcome, policy_set, count=counted)

    def _admit_values(self, trace: CallTrace) -> None:
        """Ids and arguments the policies and the tool can get exactly as sent, or the call is refused."""
        request = trace.request
        why = input_problem(request)
        if why is not None:
            request.call_id, request.session_id = shown_id(request.call_id), shown_id(request.session_id)
            raise _Ended(refusal(request.call_id, "invalid_input", f"The call was refused: {why}."))

    async def _open_session(self, trace: CallTrace) -> SessionState:
        """The run's session (fail closed when the store cannot be read); a terminated run ends the call."""
        request = trace.request
        try:
            session = trace.session = await self.store.session(request.principal.key, request.session_id,
                                                               request.run_client)
        except StoreUnavailable as exc:  # fail closed: counts and terminations elsewhere cannot be seen
            log.warning("call %s refused: %s", printable(request.call_id), exc)
            raise _Ended(refusal(request.call_id, "store_unavailable", STORE_UNAVAILABLE)) from None
        if request.iteration is None:  # the client gave none: the calls the run has made (docs/runs.md)
            request.iteration = session.calls
        if session.terminated:
            raise _Ended(refusal(request.call_id, "terminated", terminated_text(
                session, session.terminate_message or "Session terminated.", self.store.implicit_runs.idle_timeout),
                                 terminated=True), counted=False)
        return session

    async def _resolve_tool(self, trace: CallTrace, policy_set: PolicySet) -> ExposedTool:
        """The tool the call names; an unknown tool raises ``UnknownToolError`` (audited first)."""
        request = trace.request
        tool = trace.tool = self._tool(request)
        if tool is not None:
            return tool
        # A retry of an approved call whose tool has gone since gets a plain answer, not -32602.
        orphan = await self.approvals.orphaned(request.principal.key, request.call_id, request.tool)
        if orphan is not None:
            raise _Ended(_outcome(orphan), counted=False)
        self._finish(trace, refusal(request.call_id, "unknown_tool", "unknown tool"), policy_set, count=False)
        raise UnknownToolError(request.tool)

    def _admit_caller(self, trace: CallTrace, tool: ExposedTool) -> None:
        """A tool that drifted from the tools lock under ``on_drift: reject``, and a caller without a verified token (an
        API key, anonymous) to an upstream that acts on its caller's behalf, are refused here, before the policies: no
        approver is asked about a call that could never run."""
        request = trace.request
        if tool.refused is not None:  # drifted from the tools lock, `on_drift: reject` (upstreams/pinning.py)
            raise _Ended(refusal(request.call_id, "tool_drifted", tool.refused), counted=False)
        if request.caller_token is None and self.acts_for_caller(tool):
            raise _Ended(no_token_refusal(request.call_id, tool.upstream.name), counted=False)

    def _check_values_sent(self, trace: CallTrace, tool: ExposedTool) -> None:
        """The arguments' size, what the tool asks the client, and the input schema's types (what policies read)."""
        request = trace.request
        if len(json.dumps(request.arguments, default=str)) > self.settings.max_argument_bytes:
            raise _Ended(refusal(request.call_id, "reject", "The arguments are too large."))
        missing = undeclared(request.client.declares if request.client else None, tool.spec.needs_client)
        if missing:  # not listed to this client either (usable_tools): it would ask a client that cannot answer
            raise _Ended(needs_client(request.call_id, tool.name, missing), counted=False)
        # Policies are typed from the input schema (gateway/policy/typed_env.py): a value of the wrong type would
        # make a rule fail to evaluate, and the model would read which rule, not which argument. Missing or extra
        # arguments wait for the check after the rewrites, which may add or remove them.
        wrong = [p for p in tool.schema_errors(request.arguments) if not p.structural]
        if wrong:
            raise _Ended(schema_refusal(request.call_id, wrong))

    async def _request_stage(self, trace: CallTrace, tool: ExposedTool, session: SessionState,
                             policy_set: PolicySet) -> tuple[ToolCall, Decision]:
        """The request-stage decision; a reject, terminate or skip ends the call here."""
        request = trace.request
        key = request.principal.key
        try:
            # Read before the session's counters are taken: from here to counting the call there is no await,
            # but for a call a tally counts, decided and counted inside the store's admission (flow_step.py).
            usage, windows = await usage_now(self.store, key, policy_set)
            call = request_stage_call(request, tool, session, usage, self.settings.env, windows)
            call, decision = await admitted(trace, self.store, session, policy_set, call, self.observer)
        except StoreUnavailable as exc:
            log.warning("call %s refused: %s", printable(request.call_id), exc)
            trace.uncounted = True  # not run, and not a use of the run's budget
            raise _Ended(refusal(request.call_id, "store_unavailable", STORE_UNAVAILABLE)) from None
        trace.decided = call
        if decision.verdict is not Verdict.APPROVE:
            # Count the call now, before any await: concurrent calls in one session must see it.
            # (A held call is counted once it is decided: polling a pending approval is not a call.)
            self.store.count_call(session, tool.name)
            trace.counted = True
        outcome = stopped(request.call_id, session, decision, self.store.implicit_runs.idle_timeout)
        if outcome is not None:
            raise _Ended(outcome)
        return call, decision

    def _check_final_args(self, trace: CallTrace, tool: ExposedTool, decision: Decision) -> None:
        """The arguments after the rewrites: values the tool can get exactly, that fit its input schema."""
        call_id = trace.request.call_id
        if decision.rewritten and (why := problem(decision.args, where="/arguments")) is not None:
            raise _Ended(refusal(call_id, "invalid_arguments", f"The rewritten arguments were refused: {why}."))
        problems = tool.schema_errors(decision.args)
        if problems:
            raise _Ended(schema_refusal(call_id, problems))

    async def _approve_then_run(self, trace: CallTrace, tool: ExposedTool, policy_set: PolicySet, call: ToolCall,
                                decision: Decision, run: _Run) -> CallOutcome:
        """Hold for approval; run at most once; every retry gets that one run's result."""
        request = trace.request

        def recheck() -> Decision:  # before an approval is claimed: the policies in force then decide
            current = self.policies.current
            return decision if current.revision == policy_set.revision else evaluate(current, call)

        # A call held on an open connection takes one of its principal's held-call slots; past them it is
        # answered "pending" at once (the client calls again), so waiting calls cannot fill the connections.
        waits = request.holds_connection and request.wait_seconds != 0
        holding = waits and self.limits.hold(request.principal.key)
        if waits and not holding:
            self.observer.share_refused("held")
        try:
            held = HeldCall(request, tool, decision, recheck, answer_now=waits and not holding,
                            redecide=redecider(self.policies, call))
            approval = await self.observer.held(self.approvals.hold(held))
        except asyncio.CancelledError:  # the caller stopped waiting (an MCP task cancelled, ...): on the record too
            self._execution.record_cancelled(trace, tool, policy_set, UNHELD)
            raise
        finally:
            if holding:
                self.limits.unhold(request.principal.key)
        trace.approval = {"id": approval.approval_id, "approved": approval.approved, "pending": approval.pending,
                          "replayed": approval.replay is not None}
        if approval.replay is not None or approval.pending:
            trace.uncounted = True  # a poll or a retry, not a new call
        else:
            assert trace.session is not None
            self.store.count_call(trace.session, tool.name)
            trace.counted = True
        if approval.replay is not None:
            return _outcome(approval.replay, request.call_id)
        if approval.pending and approval.approval_id is not None:
            return pending(request.call_id, approval.message or "", approval.approval_id, approval.expires_at)
        if not approval.approved:
            outcome = refusal(request.call_id, approval.decision,
                              approval.message or "The call was not approved.", approval_id=approval.approval_id)
            outcome.pending_approval = approval.approval_id if approval.pending else None
            return outcome
        assert approval.approval_id is not None
        if approval.edit is not None:  # an approver edited the arguments: the edited call is the one that runs
            call, decision = released(trace, call, approval.edit, self.observer)
        # Shielded from the caller: a client that goes away mid-run must not leave the approval "executing" for
        # ever; the one run always records its outcome.
        task = asyncio.ensure_future(self._run_once(trace, policy_set, call, decision, run, approval.approval_id,
                                                    approval.edit))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await asyncio.shield(task)

    async def _run_once(self, trace: CallTrace, policy_set: PolicySet, call: ToolCall, decision: Decision, run: _Run,
                        approval_id: str, edit: ReleasedEdit | None) -> CallOutcome:
        """The one run an approval allows: admitted again, run, and its outcome stored for every retry."""
        request = trace.request
        try:
            current = self._tool(request)  # resolved now, at execution, not at approval
            if current is None:
                outcome = refusal(request.call_id, "tool_unavailable", unavailable(request.tool))
            else:
                outcome = (await readmitted(trace, self.store, policy_set, current, decision, self.env, self.observer,
                                            None if edit is None else call.args)
                           or await run(trace, current, policy_set, call, decision))
        except BaseException:
            await self.approvals.executed(approval_id, refusal(request.call_id, "interrupted", INTERRUPTED).to_rest())
            raise
        outcome.meta[f"{META}approval_id"] = approval_id
        if trace.upstream.get("reached") is False:
            # Nothing was sent, so the approval is not used up: a retry within its validity runs. A reason
            # the upstream step gave (no credential for the upstream) is kept for the caller.
            await self.approvals.released(approval_id)
            why = NOT_REACHED if outcome.text == TOOL_FAILED else f"{outcome.text} {APPROVAL_KEPT}"
            return refusal(request.call_id, "tool_failed", why, approval_id=approval_id)
        if edit is not None and trace.upstream.get("status") != "not_called":
            outcome = with_note(outcome, edit, self.audit.redactor)  # the agent is told what ran
        await self.approvals.executed(approval_id, _stored(trace, outcome, current, approval_id).to_rest())
        return outcome

    # --- what the steps share ---------------------------------------------------------------------------

    def _tool(self, request: CallRequest) -> ExposedTool | None:
        """The tool a call names: the one it carries (an agent-run tool), else the registry's."""
        return request.exposed if request.exposed is not None else self.registry.get(request.tool)

    def _finish(self, trace: CallTrace, outcome: CallOutcome, policy_set: PolicySet, *,
                count: bool = True) -> CallOutcome:
        """Audit, then count; if the audit write fails the call fails closed."""
        tool, session = trace.tool, trace.session
        try:
            self.audit.write(outcome_event(trace, tool, session, outcome, policy_set.revision, self.audit.redactor,
                                           flow=policy_set.uses_flow))
        except AuditWriteError:
            ran = trace.upstream.get("status") == "ok"
            outcome = refusal(outcome.call_id, "audit_failed", AUDIT_FAILED_AFTER_RUN if ran else AUDIT_FAILED)
        if count and tool is not None and session is not None and not trace.uncounted:
            terminated = outcome.meta.get("gateway/terminated")
            if not trace.counted:
                self.store.count_call(session, tool.name)
            self.store.record_outcome(session, rejected=outcome.decision in _REFUSED,
                                      terminate_message=outcome.text if terminated else None, tool=tool.name)
            record_history(trace, self.store, session, tool.name, outcome)
        return outcome


def _outcome(stored: dict[str, Any], call_id: str | None = None) -> CallOutcome:
    """An outcome stored with an approval, returned again to a retry (under the retry's call id, if given:
    a retry without a call id is bound by its run and got a new one)."""
    outcome = CallOutcome(**{k: stored[k] for k in _OUTCOME_FIELDS})
    if call_id is not None and call_id != outcome.call_id:
        outcome.call_id, outcome.meta = call_id, {**outcome.meta, f"{META}call_id": call_id}
    return outcome


def _stored(trace: CallTrace, outcome: CallOutcome, tool: ExposedTool | None, approval_id: str) -> CallOutcome:
    """The outcome kept with an approval for its retries: the one run's, except that a call handed out to its
    caller to run (decide-only: the model proxy's agent-run tools) is the execution itself and is never handed
    out again."""
    if tool is None or not trace.hand_out or outcome.is_error:
        return outcome
    return handed_out(outcome.call_id, tool.name, approval_id, now_rfc3339())
