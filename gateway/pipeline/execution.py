"""The last steps of a call that may act: its intent on record, its request-stage labels added to the run,
then the upstream (or, decide-only, the hand-out to the caller), the result's values admitted, the
response-stage policies (and their labels) and the result.

A call cancelled on the way (while its intent is flushed, while its tool runs) writes its outcome event
here too, so an intent never stands alone for a call this process saw end.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.core.errors import AuditWriteError
from gateway.core.values import Profile
from gateway.observe.observer import CallObserver
from gateway.pipeline.admission import withheld
from gateway.pipeline.audit import AuditLog
from gateway.pipeline.call_events import intent_event, outcome_event
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.deciding import decide, response_stage_call
from gateway.pipeline.flow_step import add_labels
from gateway.pipeline.request import CallOutcome
from gateway.pipeline.results import (
    ADMITTED,
    AUDIT_FAILED,
    CANCELLED,
    UNRECORDED,
    admitted,
    admitted_result,
    from_response_stage,
    refusal,
    tool_result,
)
from gateway.pipeline.run_end import terminated_text
from gateway.pipeline.upstream_step import call_upstream
from gateway.policy.call import ToolCall
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.policyset import PolicySet
from gateway.store.base import SessionStore
from gateway.upstreams.base import ToolResult
from gateway.upstreams.registry import ExposedTool

__all__ = ["Execution"]

log = logging.getLogger("gateway.pipeline")


class Execution:
    """Runs a decided call: through its upstream (``run``) or, decide-only, back to its caller (``hand_out``)."""

    def __init__(self, audit: AuditLog, store: SessionStore, observer: CallObserver, call_timeout: float) -> None:
        self.audit = audit
        self.store = store
        self.observer = observer
        self.call_timeout = call_timeout

    async def run(self, trace: CallTrace, tool: ExposedTool, policy_set: PolicySet, call: ToolCall,
                  decision: Decision) -> CallOutcome:
        """The intent on record, the upstream, then the result through the response stage."""
        refused = await self.write_intent(trace, tool, policy_set, decision) or self.going_on(trace, decision)
        if refused is not None:
            return refused
        try:
            result = await call_upstream(trace, tool, decision, self.call_timeout, self.observer)
        except asyncio.CancelledError:  # the caller went away mid-run: its intent must not stand alone
            self.record_cancelled(trace, tool, policy_set)
            raise
        if isinstance(result, CallOutcome):
            return result
        return self.respond(trace, tool, policy_set, call, decision, result)

    async def hand_out(self, trace: CallTrace, tool: ExposedTool, policy_set: PolicySet, call: ToolCall,
                       decision: Decision) -> CallOutcome:
        """Decide-only's last step: the intent on record, then the admitted arguments for the caller to run.

        Handing the call to its runner (upstream ``client``) is that call's execution, and is recorded as the
        upstream step is: ``upstream_outcome`` ok. Response-stage rules read the admitted arguments as the
        result (docs/model-proxy.md), since the real result only exists later, with the caller."""
        refused = await self.write_intent(trace, tool, policy_set, decision) or self.going_on(trace, decision)
        if refused is not None:
            return refused
        trace.upstream, trace.upstream_ms = {"status": "ok", "is_error": False}, 0.0
        if not policy_set.index.lookup(tool.name).response:
            return admitted(trace.request.call_id, str(decision.verdict), decision.args,
                            rewritten=decision.rewritten or None)
        outcome = self.respond(trace, tool, policy_set, call, decision, admitted_result(decision.args))
        args = outcome.structured.get(ADMITTED) if isinstance(outcome.structured, dict) else None
        if not outcome.is_error and isinstance(args, dict):  # else the rules made it an answer the model reads
            outcome.admitted = args
        return outcome

    def respond(self, trace: CallTrace, tool: ExposedTool, policy_set: PolicySet, call: ToolCall,
                decision: Decision, result: ToolResult) -> CallOutcome:
        """Admit the result's values, then the response-stage policies, then the result the frontend gets."""
        call_id, verdict = trace.request.call_id, str(decision.verdict)
        seen_by_policies = bool(policy_set.index.lookup(tool.name).response)
        refused = withheld(call_id, result.content, result.structured,
                           Profile.POLICY if seen_by_policies else Profile.JSON)
        if refused is not None:
            trace.upstream["withheld"] = refused.text
            return refused
        if not seen_by_policies:
            return tool_result(call_id, verdict, result, rewritten=decision.rewritten or None)
        after = decide(trace, policy_set, response_stage_call(call, decision, result), self.observer)
        refused = add_labels(trace, self.store, Stage.RESPONSE, after.labels)  # what the run has now seen
        if refused is not None:
            return refused
        if after.verdict is Verdict.REJECT:
            return refusal(call_id, "reject", after.message or "The result was withheld by policy.")
        if after.verdict is Verdict.TERMINATE:
            assert trace.session is not None
            return refusal(call_id, "terminate", terminated_text(
                trace.session, after.message or "", self.store.implicit_runs.idle_timeout), terminated=True)
        final = from_response_stage(result, after.result) if after.rewritten else result
        if after.rewritten and (refused := withheld(call_id, final.content, final.structured, Profile.JSON)):
            return refused
        return tool_result(call_id, verdict, final, rewritten=(decision.rewritten or after.rewritten) or None)

    def going_on(self, trace: CallTrace, decision: Decision) -> CallOutcome | None:
        """The call goes on to run: its request-stage labels join the run (or, too many, refuse it)."""
        refused = add_labels(trace, self.store, Stage.REQUEST, decision.labels)
        if refused is not None:
            trace.upstream = {"status": "not_called", "error": "the run would carry too many labels"}
        return refused

    async def write_intent(self, trace: CallTrace, tool: ExposedTool, policy_set: PolicySet,
                           decision: Decision) -> CallOutcome | None:
        """The intent on disk before the tool can act, or the refusal the call ends with."""
        try:
            await self.audit.write_durable(intent_event(trace, tool, decision, policy_set.revision,
                                                        self.audit.redactor))
        except AuditWriteError as exc:
            trace.upstream = {"status": "not_called", "error": f"the intent was not recorded: {exc}"}
            return refusal(trace.request.call_id, "audit_failed", AUDIT_FAILED)
        except asyncio.CancelledError:  # gone while its intent was being flushed (group commit): on the record too
            self.record_cancelled(trace, tool, policy_set, UNRECORDED)
            raise
        return None

    def record_cancelled(self, trace: CallTrace, tool: ExposedTool, policy_set: PolicySet,
                         message: str = CANCELLED) -> None:
        """The outcome event of a call cancelled while held or while its tool ran (best effort: the caller is gone)."""
        outcome = refusal(trace.request.call_id, "cancelled", message)
        try:
            self.audit.write(outcome_event(trace, tool, trace.session, outcome, policy_set.revision,
                                           self.audit.redactor, flow=policy_set.uses_flow))
        except AuditWriteError:
            log.error("the outcome of cancelled call %s could not be recorded", trace.request.call_id)
