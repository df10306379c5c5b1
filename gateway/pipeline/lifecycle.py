"""The life of one call, in order. Each step is a few lines here or a call into its own module.

    per-principal limits → admit the values (policies must see exactly what the tool gets) →
    resolve tool → check the values sent against the tool's input schema (types, ranges: what policies
    read) → request-stage policies (mutate, validate) → check final args against the tool's input
    schema (what a rewrite may mend: missing or extra arguments) → approval (the gate; held on a
    connection only within the principal's held-call share, else answered pending at once) → execute
    upstream with a timeout → admit the result's values → response-stage policies → the frontend's
    result → audit event → session counters

Every call gets exactly one outcome paired with its call id; a tool that is not exposed is the
only case that raises (``UnknownToolError``, which frontends turn into a protocol error).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.clock import now_rfc3339
from gateway.core.errors import (
    AuditWriteError,
    InvalidArgumentsError,
    StoreUnavailable,
    UnknownToolError,
    UpstreamError,
    UpstreamNotReached,
)
from gateway.core.limits import MAX_AUDIT_ERROR_CHARS
from gateway.core.values import Profile, door_problem, printable, problem, shown_id
from gateway.observe.observer import CallObserver
from gateway.pipeline.approvals import ApprovalGate, HeldCall, NoApprovals
from gateway.pipeline.audit import AuditLog
from gateway.pipeline.principal_limits import PrincipalLimits
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.results import (
    META,
    as_result_info,
    from_response_stage,
    handed_out,
    needs_client,
    pending,
    refusal,
    schema_refusal,
    skipped,
    tool_result,
)
from gateway.pipeline.run_end import terminated_text
from gateway.policy.call import CallInfo, Principal, SessionInfo, ToolCall, UsageInfo
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.policyset import PolicySet, env_revision
from gateway.reload.holder import PolicyHolder
from gateway.store.base import SessionStore
from gateway.store.model import SessionState
from gateway.upstreams.client_requests import Declares, calling_client, undeclared
from gateway.upstreams.registry import ExposedTool, ToolRegistry

__all__ = ["Gateway"]

log = logging.getLogger("gateway.pipeline")

TOOL_FAILED = "The tool failed. Try again later or use another tool."
POLICY_FAILED = "The policies could not be evaluated for this call, so it was refused."
INTERRUPTED = "The approved call was interrupted while it ran; it may or may not have taken effect."
CANCELLED = "The call was cancelled while the tool ran; it may or may not have taken effect."
UNHELD = "The call stopped waiting for its approval before it was decided; it did not run."
NOT_REACHED = ("The tool's service could not be reached, so the approved call was not sent. The approval is still "
               "valid: call again to run it.")


def _unavailable(tool: str) -> str:
    return f"The tool {tool} is no longer available, so the approved call was not run."


def _outcome(stored: dict[str, Any], call_id: str | None = None) -> CallOutcome:
    """An outcome stored with an approval, returned again to a retry (under the retry's call id, if given:
    a retry without a call id is bound by its run and got a new one)."""
    outcome = CallOutcome(**{k: stored[k] for k in _OUTCOME_FIELDS})
    if call_id is not None and call_id != outcome.call_id:
        outcome.call_id, outcome.meta = call_id, {**outcome.meta, f"{META}call_id": call_id}
    return outcome
def _stored(outcome: CallOutcome, tool: ExposedTool | None, approval_id: str) -> CallOutcome:
    """The outcome kept with an approval for its retries: the one run's, except that a call handed out to
    the agent to run (the model proxy's agent-run tools) is the execution itself and is never handed out again."""
    if tool is None or tool.upstream.name != CLIENT_UPSTREAM or outcome.is_error:
        return outcome
    return handed_out(outcome.call_id, tool.name, approval_id, now_rfc3339())


AUDIT_FAILED = "The call could not be recorded, so it was not run."
STORE_UNAVAILABLE = ("The gateway's database could not be read, so this run's limits could not be checked and the "
                     "call was not run. Try again shortly.")
UNRECORDED = "The call was cancelled while its intent was being recorded; it did not run."
AUDIT_FAILED_AFTER_RUN = "The tool ran, but the call could not be recorded, so its result is withheld."


@dataclass(slots=True)
class _Trace:
    """What the audit event needs, filled in as the call goes."""

    request: CallRequest
    audit_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # shared by the intent and the outcome
    started: float = field(default_factory=time.perf_counter)
    policy_us: float = 0.0
    upstream_ms: float | None = None
    decisions: list[Decision] = field(default_factory=list)
    upstream: dict[str, Any] = field(default_factory=lambda: {"status": "not_called"})
    session: SessionState | None = None
    approval: dict[str, Any] | None = None
    counted: bool = False  # the session already counts this call
    uncounted: bool = False  # a poll of a pending approval or a replay: not a new call
    decided: ToolCall | None = None  # the request-stage input, for the audit's replay context


class Gateway:
    """Runs calls through policies to upstreams; one instance per process."""

    def __init__(self, policies: PolicyHolder, registry: ToolRegistry, store: SessionStore, audit: AuditLog,
                 *, env: dict[str, Any] | None = None, call_timeout: float = 30.0,
                 max_argument_bytes: int = 1_000_000, approvals: ApprovalGate | None = None,
                 limits: PrincipalLimits | None = None, observer: CallObserver | None = None) -> None:
        self.policies = policies
        self.registry = registry
        self.store = store
        self.audit = audit
        self.env = dict(env or {})
        self.call_timeout = call_timeout
        self.max_argument_bytes = max_argument_bytes
        self.approvals: ApprovalGate = approvals or NoApprovals()
        self.limits = limits or PrincipalLimits()
        self.observer = observer or CallObserver()  # metrics and traces (gateway/observe)
        self._running: set[asyncio.Future[CallOutcome]] = set()

    def visible_tools(self, principal: Principal) -> list[ExposedTool]:
        """Tools this principal may see: those the policies do not refuse whatever the arguments."""
        policy_set = self.policies.current
        return [t for t in self.registry.all()
                if policy_set.admits_tool(ToolCall(t.info, principal=principal, env=self.env))]

    def usable_tools(self, principal: Principal, declares: Declares | None) -> list[ExposedTool]:
        """The visible tools a client can use: those whose requests to it (``needs_client``) it declared.

        ``declares`` is the client's ``ClientChannel.declares``; None for a caller that cannot be asked (REST,
        the model proxy)."""
        return [t for t in self.visible_tools(principal) if not undeclared(declares, t.spec.needs_client)]

    def _tool(self, request: CallRequest) -> ExposedTool | None:
        """The tool a call names: the one it carries (an agent-run tool), else the registry's."""
        return request.exposed if request.exposed is not None else self.registry.get(request.tool)

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
        """Carry out one call."""
        return await self.observer.call(request, self._call(request), self.registry)

    async def _call(self, request: CallRequest) -> CallOutcome:
        trace = _Trace(request)
        policy_set = self.policies.current  # one revision for the whole call
        exceeded = self.limits.acquire(request.principal.id)
        if exceeded is not None:
            outcome = refusal(printable(request.call_id), "rate_limited", exceeded.message,
                              retry_after=exceeded.retry_after)
            return self._finish(trace, None, None, outcome, policy_set)
        try:
            return await self._admitted(trace, policy_set)
        finally:
            self.limits.release(request.principal.id)
            await self.store.settle()  # with other processes on the store: its counts written before it answers

    async def _admitted(self, trace: _Trace, policy_set: PolicySet) -> CallOutcome:
        request = trace.request
        why = _input_problem(request)
        if why is not None:
            request.call_id, request.session_id = shown_id(request.call_id), shown_id(request.session_id)
            outcome = refusal(request.call_id, "invalid_input", f"The call was refused: {why}.")
            return self._finish(trace, None, None, outcome, policy_set)
        try:
            session = trace.session = await self.store.session(request.principal.id, request.session_id,
                                                               request.run_client)
        except StoreUnavailable as exc:  # fail closed: counts and terminations elsewhere cannot be seen
            log.warning("call %s refused: %s", printable(request.call_id), exc)
            return self._finish(trace, None, None, refusal(request.call_id, "store_unavailable", STORE_UNAVAILABLE),
                                policy_set)
        if request.iteration is None:  # the client gave none: the calls the run has made (docs/runs.md)
            request.iteration = session.calls
        if session.terminated:
            outcome = refusal(request.call_id, "terminated", terminated_text(
                session, session.terminate_message or "Session terminated.", self.store.implicit_runs.idle_timeout),
                              terminated=True)
            return self._finish(trace, None, session, outcome, policy_set, count=False)
        tool = self._tool(request)
        if tool is None:
            # A retry of an approved call whose tool has gone since gets a plain answer, not -32602.
            orphan = await self.approvals.orphaned(request.principal.id, request.call_id, request.tool)
            if orphan is not None:
                return self._finish(trace, None, session, _outcome(orphan), policy_set, count=False)
            self._finish(trace, None, session, refusal(request.call_id, "unknown_tool", "unknown tool"),
                         policy_set, count=False)
            raise UnknownToolError(request.tool)
        if len(json.dumps(request.arguments, default=str)) > self.max_argument_bytes:
            outcome = refusal(request.call_id, "reject", "The arguments are too large.")
            return self._finish(trace, tool, session, outcome, policy_set)
        missing = undeclared(request.client.declares if request.client else None, tool.spec.needs_client)
        if missing:  # not listed to this client either (usable_tools): it would ask a client that cannot answer
            return self._finish(trace, tool, session, needs_client(request.call_id, tool.name, missing), policy_set,
                                count=False)
        # Policies are typed from the input schema (gateway/policy/typed_env.py): a value of the wrong type would
        # make a rule fail to evaluate, and the model would read which rule, not which argument. Missing or extra
        # arguments wait for the check after the rewrites, which may add or remove them.
        wrong = [p for p in tool.schema_errors(request.arguments) if not p.structural]
        if wrong:
            return self._finish(trace, tool, session, schema_refusal(request.call_id, wrong), policy_set)
        outcome = await self._decide_and_run(trace, tool, session, policy_set)
        return self._finish(trace, tool, session, outcome, policy_set)

    async def _decide_and_run(self, trace: _Trace, tool: ExposedTool, session: SessionState,
                              policy_set: PolicySet) -> CallOutcome:
        request = trace.request
        # Read before the session's counters are taken: from here to counting the call there is no await.
        try:
            usage = await self.store.usage_now(request.principal.id)
        except StoreUnavailable as exc:
            log.warning("call %s refused: %s", printable(request.call_id), exc)
            trace.uncounted = True  # not run, and not a use of the run's budget
            return refusal(request.call_id, "store_unavailable", STORE_UNAVAILABLE)
        call = ToolCall(
            tool=tool.info, args=request.arguments, principal=request.principal,
            session=SessionInfo(session.id, session.calls, dict(session.calls_by_tool), session.rejected,
                                session.started_at, session.implicit),
            call=CallInfo(request.call_id, session.calls if request.iteration is None else request.iteration,
                          now_rfc3339()), env=self.env,
            usage={name: UsageInfo(t.calls, t.calls_by_tool, t.rejected)
                   for name, t in usage.items()},
        )
        trace.decided = call
        decision = self._decide(trace, policy_set, call)
        verdict, message = decision.verdict, decision.message or ""
        if verdict is not Verdict.APPROVE:
            # Count the call now, before any await: concurrent calls in one session must see it.
            # (A held call is counted once it is decided: polling a pending approval is not a call.)
            self.store.count_call(session, tool.name)
            trace.counted = True
        if verdict is Verdict.REJECT:
            return refusal(request.call_id, "reject", message)
        if verdict is Verdict.TERMINATE:
            return refusal(request.call_id, "terminate",
                           terminated_text(session, message, self.store.implicit_runs.idle_timeout), terminated=True)
        if verdict is Verdict.SKIP:
            outcome = skipped(request.call_id, decision.result)
            return _withheld(request.call_id, outcome.content, outcome.structured, Profile.JSON) or outcome
        if decision.rewritten and (why := problem(decision.args, where="/arguments")) is not None:
            return refusal(request.call_id, "invalid_arguments", f"The rewritten arguments were refused: {why}.")
        problems = tool.schema_errors(decision.args)
        if problems:
            return schema_refusal(request.call_id, problems)
        if verdict is Verdict.APPROVE:
            return await self._approve_then_execute(trace, tool, policy_set, call, decision)
        return await self._execute(trace, tool, policy_set, call, decision)

    async def _approve_then_execute(self, trace: _Trace, tool: ExposedTool, policy_set: PolicySet,
                                    call: ToolCall, decision: Decision) -> CallOutcome:
        """Hold for approval; run at most once; every retry gets that one run's result."""
        request = trace.request

        def recheck() -> Decision:  # before an approval is claimed: the policies in force then decide
            current = self.policies.current
            return decision if current.revision == policy_set.revision else _evaluate(current, call)

        # A call held on an open connection takes one of its principal's held-call slots; past them it is
        # answered "pending" at once (the client calls again), so waiting calls cannot fill the connections.
        waits = request.holds_connection and request.wait_seconds != 0
        holding = waits and self.limits.hold(request.principal.id)
        if waits and not holding:
            self.observer.share_refused("held")
        try:
            approval = await self.observer.held(self.approvals.hold(HeldCall(request, tool, decision, recheck,
                                                                             answer_now=waits and not holding)))
        except asyncio.CancelledError:  # the caller stopped waiting (an MCP task cancelled, ...): on the record too
            self._record_cancelled(trace, tool, policy_set, UNHELD)
            raise
        finally:
            if holding:
                self.limits.unhold(request.principal.id)
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
        approval_id = approval.approval_id
        assert approval_id is not None

        async def run_once() -> CallOutcome:
            # Shielded from the caller: a client that goes away mid-run must not leave the approval
            # "executing" for ever; the one run always records its outcome.
            try:
                current = self._tool(request)  # resolved now, at execution, not at approval
                if current is None:
                    outcome = refusal(request.call_id, "tool_unavailable", _unavailable(request.tool))
                else:
                    outcome = await self._execute(trace, current, policy_set, call, decision)
            except BaseException:
                await self.approvals.executed(approval_id,
                                              refusal(request.call_id, "interrupted", INTERRUPTED).to_rest())
                raise
            outcome.meta[f"{META}approval_id"] = approval_id
            if trace.upstream.get("reached") is False:
                # Nothing was sent, so the approval is not used up: a retry within its validity runs.
                await self.approvals.released(approval_id)
                outcome = refusal(request.call_id, "tool_failed", NOT_REACHED, approval_id=approval_id)
            else:
                await self.approvals.executed(approval_id, _stored(outcome, current, approval_id).to_rest())
            return outcome

        task = asyncio.ensure_future(run_once())
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await asyncio.shield(task)

    async def _execute(self, trace: _Trace, tool: ExposedTool, policy_set: PolicySet, call: ToolCall,
                       decision: Decision) -> CallOutcome:
        request = trace.request
        try:  # the intent is on disk before the tool can act, or the tool does not run
            await self.audit.write_durable(self._intent(trace, tool, decision, policy_set))
        except AuditWriteError as exc:
            trace.upstream = {"status": "not_called", "error": f"the intent was not recorded: {exc}"}
            return refusal(request.call_id, "audit_failed", AUDIT_FAILED)
        except asyncio.CancelledError:  # gone while its intent was being flushed (group commit): on the record too
            self._record_cancelled(trace, tool, policy_set, UNRECORDED)
            raise
        started = time.perf_counter()
        timeout = self.call_timeout if request.timeout is None else request.timeout
        timeout = min(timeout, tool.timeout) if tool.timeout else timeout  # an upstream's own timeout always holds
        try:
            with calling_client(request.client):
                result = await self.observer.upstream(tool.upstream.name, tool.upstream.call(
                    tool.spec.name, decision.args, timeout, request.upstream_progress))
        except InvalidArgumentsError as exc:  # arguments the upstream's request cannot carry safely
            trace.upstream = {"status": "not_called", "error": str(exc)}
            return refusal(request.call_id, "invalid_arguments", f"The arguments were refused: {exc}")
        except UpstreamNotReached as exc:  # provably never sent (see errors.UpstreamNotReached)
            trace.upstream = {"status": "failed", "reached": False, "error": str(exc)[:MAX_AUDIT_ERROR_CHARS]}
            return refusal(request.call_id, "tool_failed", TOOL_FAILED)
        except UpstreamError as exc:
            trace.upstream = {"status": "failed", "error": str(exc)[:MAX_AUDIT_ERROR_CHARS]}
            return refusal(request.call_id, "tool_failed", TOOL_FAILED)
        except asyncio.CancelledError:  # the caller went away mid-run: its intent must not stand alone
            trace.upstream = {"status": "cancelled"}
            trace.upstream_ms = (time.perf_counter() - started) * 1e3
            self._record_cancelled(trace, tool, policy_set)
            raise
        finally:
            trace.upstream_ms = (time.perf_counter() - started) * 1e3
        trace.upstream = {"status": "ok", "is_error": result.is_error}
        verdict = str(decision.verdict)
        seen_by_policies = bool(policy_set.index.lookup(tool.name).response)
        withheld = _withheld(request.call_id, result.content, result.structured,
                             Profile.POLICY if seen_by_policies else Profile.JSON)
        if withheld is not None:
            trace.upstream["withheld"] = withheld.text
            return withheld
        if not seen_by_policies:
            return tool_result(request.call_id, verdict, result, rewritten=decision.rewritten or None)
        response_call = ToolCall(
            tool=call.tool, args=decision.args, original_args=call.args, principal=call.principal,
            session=call.session, usage=call.usage, call=call.call, env=call.env, stage=Stage.RESPONSE,
            result=as_result_info(result),
        )
        after = self._decide(trace, policy_set, response_call)
        if after.verdict is Verdict.REJECT:
            return refusal(request.call_id, "reject", after.message or "The result was withheld by policy.")
        if after.verdict is Verdict.TERMINATE:
            assert trace.session is not None
            return refusal(request.call_id, "terminate", terminated_text(
                trace.session, after.message or "", self.store.implicit_runs.idle_timeout), terminated=True)
        final = from_response_stage(result, after.result) if after.rewritten else result
        if after.rewritten and (withheld := _withheld(request.call_id, final.content, final.structured, Profile.JSON)):
            return withheld
        return tool_result(request.call_id, verdict, final,
                           rewritten=(decision.rewritten or after.rewritten) or None)

    def _decide(self, trace: _Trace, policy_set: PolicySet, call: ToolCall) -> Decision:
        decision = _evaluate(policy_set, call)
        trace.policy_us += decision.elapsed_us
        self.observer.decided(decision)
        trace.decisions.append(decision)
        return decision

    def _record_cancelled(self, trace: _Trace, tool: ExposedTool, policy_set: PolicySet,
                          message: str = CANCELLED) -> None:
        """The outcome event of a call cancelled while held or while its tool ran (best effort: the caller is gone)."""
        outcome = refusal(trace.request.call_id, "cancelled", message)
        try:
            self.audit.write(self._event(trace, tool, trace.session, outcome, policy_set))
        except AuditWriteError:
            log.error("the outcome of cancelled call %s could not be recorded", trace.request.call_id)

    def _finish(self, trace: _Trace, tool: ExposedTool | None, session: SessionState | None, outcome: CallOutcome,
                policy_set: PolicySet, *, count: bool = True) -> CallOutcome:
        """Audit, then count; if the audit write fails the call fails closed."""
        try:
            self.audit.write(self._event(trace, tool, session, outcome, policy_set))
        except AuditWriteError:
            ran = trace.upstream.get("status") == "ok"
            outcome = refusal(outcome.call_id, "audit_failed", AUDIT_FAILED_AFTER_RUN if ran else AUDIT_FAILED)
        if count and tool is not None and session is not None and not trace.uncounted:
            terminated = outcome.meta.get("gateway/terminated")
            if not trace.counted:
                self.store.count_call(session, tool.name)
            self.store.record_outcome(session, rejected=outcome.decision in _REFUSED,
                                      terminate_message=outcome.text if terminated else None, tool=tool.name)
        return outcome

    def _intent(self, trace: _Trace, tool: ExposedTool, decision: Decision, policy_set: PolicySet) -> dict[str, Any]:
        """The record written before the tool runs: who asks to run what, with which arguments, and why."""
        final, redacted = self.audit.redactor.apply(decision.args, "/final_args")
        assert trace.session is not None
        return {
            **self._head("call.intent", trace, tool, trace.session),
            "final_args": final,
            "verdict": str(decision.verdict),
            "rewritten": decision.rewritten,
            "decided_by": [d.decided_by for d in trace.decisions if d.decided_by],
            "approval": trace.approval,
            "revision": policy_set.revision,
            "redacted": redacted,
        }

    @staticmethod
    def _head(kind: str, trace: _Trace, tool: ExposedTool | None, session: SessionState | None) -> dict[str, Any]:
        request = trace.request
        return {
            "event": kind,
            "id": trace.audit_id,
            "time": now_rfc3339(),
            "call_id": request.call_id,
            "iteration": request.iteration,
            "frontend": request.frontend,
            "principal": {"id": request.principal.id, "groups": list(request.principal.groups)},
            "session": session.id if session is not None else request.session_id,
            "tool": request.tool,
            "upstream": tool.upstream.name if tool else None,
            **({"task": request.task_id} if request.task_id is not None else {}),
        }

    def _event(self, trace: _Trace, tool: ExposedTool | None, session: SessionState | None,
               outcome: CallOutcome, policy_set: PolicySet) -> dict[str, Any]:
        request = trace.request
        redactor = self.audit.redactor
        original, redacted_original = redactor.apply(request.arguments, "/original_args")
        final_args = trace.decisions[0].args if trace.decisions else request.arguments
        final, redacted_final = redactor.apply(final_args, "/final_args")
        context, redacted_context = self._replay_context(trace)
        return {
            **self._head("call.outcome", trace, tool, session),
            "original_args": original,
            "final_args": final,
            "verdict": outcome.decision,
            "is_error": outcome.is_error,
            "message": outcome.text if outcome.is_error else None,
            "rules": [r.to_dict() | {"stage": str(d.stage)} for d in trace.decisions for r in d.rules],
            "decided_by": [d.decided_by for d in trace.decisions if d.decided_by],
            "approval": trace.approval,
            "upstream_outcome": trace.upstream,
            "latency": {
                "policy_us": round(trace.policy_us, 1),
                "upstream_ms": round(trace.upstream_ms, 3) if trace.upstream_ms is not None else None,
                "total_ms": round((time.perf_counter() - trace.started) * 1e3, 3),
            },
            "revision": policy_set.revision,
            "redacted": redacted_original + redacted_final + redacted_context,
            **({"context": context} if context is not None else {}),
        }

    def _replay_context(self, trace: _Trace) -> tuple[dict[str, Any] | None, list[str]]:
        """What `gateway replay` needs to decide the call again: the rest of the request-stage input."""
        call = trace.decided
        if call is None or not trace.decisions:
            return None, []  # refused before any policy saw it: nothing to replay
        decision = trace.decisions[0]
        extra = {"usage": call.usage_cel()} if call.usage else {}  # the principal's rolling windows
        return self.audit.redactor.apply({
            "tool": {"title": call.tool.title, "description": call.tool.description,
                     "annotations": call.tool.annotations},
            "principal_claims": call.principal.claims,
            "session": call.session.to_cel(),
            "call_time": call.call.time,
            "env_revision": env_revision(call.env),
            "stage": str(decision.stage),
            "policy_verdict": str(decision.verdict),
            "policy_decided_by": decision.decided_by,
            **extra,
        }, "/context")


def _evaluate(policy_set: PolicySet, call: ToolCall) -> Decision:
    """The policies' decision on ``call``; a refusal if the engine raises (it should never: fail closed)."""
    try:
        return policy_set.decide(call)
    except Exception:
        log.exception("policy evaluation raised for %s", call.tool.name)
        return Decision(Verdict.REJECT, call.stage, call.args, call.original_args or call.args,
                        policy_set.revision, POLICY_FAILED, "engine-error")


_REFUSED = frozenset({"reject", "terminate", "invalid_arguments", "terminated"})
_OUTCOME_FIELDS = ("call_id", "decision", "is_error", "content", "structured", "meta")


def _withheld(call_id: str, content: Any, structured: Any, profile: Profile) -> CallOutcome | None:
    """A refusal in place of a result that holds a value the frontends (or policies) cannot carry exactly."""
    why = problem({"content": content, "structured": structured}, profile, where="/result")
    return None if why is None else refusal(call_id, "invalid_result", f"The tool's result was withheld: {why}.")


def _input_problem(request: CallRequest) -> str | None:
    """Why the values of a call cannot go to policies and the tool exactly as given, or None."""
    if request.refused is not None:
        return request.refused
    return door_problem(request.call_id, request.session_id, request.arguments)
