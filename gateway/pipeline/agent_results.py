"""The results of the tools an agent runs itself, through the response stage before its model reads them.

The model proxy (gateway/models/) hands the agent the calls of its own tools; the agent runs them and sends each
result back in its next request, as a ``role: tool`` message. Before the model reads one:

    the run's session (once per request) → the response-stage call: the tool, the arguments the agent was given,
    the result's text, the run's labels, tallies and history, the principal's usage windows and their tallies →
    the policies decide it → the labels it gives added to the run (gateway/pipeline/flow_step.py, as for a
    gateway-run call) → the first time this tool call id is seen in the run: a rejection or a termination counted
    and one ``call.result`` audit event → what the model reads: the result as sent, the rewritten result or the refusal;
    a terminate ends the run, and the agent is told instead of the model being asked

Every request repeats the conversation, so every result is decided on every request: the model never reads an
original that a rule withholds or rewrites. Labels are the run's set (adding one it has changes nothing), and
the audit event is written once per tool call id (remembered per process, bounded by ``MODEL_RESULTS_KEPT``: a
forgotten id is recorded again). A result that cannot be screened fails closed: the model reads why it was
withheld (the store cannot be read, the event cannot be written, the run would carry too many labels).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.core.errors import AuditWriteError, StoreUnavailable
from gateway.core.limits import MODEL_RESULTS_KEPT
from gateway.core.values import Profile
from gateway.observe.tracing import current_trace_id
from gateway.pipeline.admission import withheld
from gateway.pipeline.audit import Redactor
from gateway.pipeline.call_events import outcome_event
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.deciding import decide, request_stage_call
from gateway.pipeline.flow_step import add_labels, usage_now
from gateway.pipeline.lifecycle import Gateway
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.results import RESULT_WITHHELD, as_result_info, from_response_stage, refusal, tool_result
from gateway.pipeline.run_end import terminated_text
from gateway.pipeline.runs import Run
from gateway.policy.call import Principal
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.flow import Tallies
from gateway.policy.policyset import PolicySet
from gateway.store.model import SessionState
from gateway.store.usage import Totals
from gateway.upstreams.base import ToolResult
from gateway.upstreams.registry import ExposedTool

__all__ = ["RESULT_EVENT", "AgentResult", "AgentResults", "Screened"]

RESULT_EVENT = "call.result"  # the audit event of one agent-run call's result (its call.outcome was the hand-out)

# What the model reads in place of a result the gateway, not a policy, withheld.
UNREAD = ("The gateway's database could not be read, so this tool result could not be checked and is withheld. "
          "Try again shortly.")
UNRECORDED = "This tool result could not be recorded, so it is withheld."
LABELS_FULL = "This tool result would give the run more labels than it may carry, so it is withheld."
ENDED = "This run was terminated."  # a terminate rule without a message

_REFUSED = frozenset({"reject", "terminate"})


@dataclass(frozen=True, slots=True)
class AgentResult:
    """One result an agent sent back: its tool call (id, tool, the arguments it was given, the turn) and its text."""

    call_id: str
    tool: ExposedTool
    arguments: dict[str, Any]
    text: str
    iteration: int


@dataclass(frozen=True, slots=True)
class Screened:
    """What became of one result: what the model reads instead (``content``; None: the result as sent), or
    ``ended``: the run is over and the agent reads this."""

    call_id: str
    tool: str
    decision: str  # allow | reject | terminate | invalid_result | store_unavailable | audit_failed
    content: str | None = None
    ended: str | None = None
    rewritten: bool = False
    checked: bool = True  # false: no response-stage rule matches its tool (read as sent, nothing recorded)

    def report(self) -> dict[str, Any]:
        """Its entry in the response's ``gateway.results`` (gateway/models/proxy.py)."""
        entry: dict[str, Any] = {"id": self.call_id, "tool": self.tool, "decision": self.decision}
        if self.rewritten:
            entry["rewritten"] = True
        if self.decision != "allow":
            entry["message"] = self.ended if self.ended is not None else self.content
        return entry


class AgentResults:
    """Screens the results agents send back; remembers which tool call ids it has recorded."""

    def __init__(self, gateway: Gateway, kept: int = MODEL_RESULTS_KEPT) -> None:
        self.gateway = gateway
        self._kept = kept
        self._recorded: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    async def screen(self, principal: Principal, run: Run, results: Sequence[AgentResult]) -> list[Screened]:
        """What becomes of each result, in order: decided when response-stage rules match its tool (else read as
        sent, ``checked`` false); a terminate stops there (the results after it are not read)."""
        policy_set = self.gateway.policies.current  # one revision for the whole request
        looked = [(r, bool(policy_set.index.lookup(r.tool.name).response)) for r in results]
        if not any(checked for _, checked in looked):
            return [_unchecked(r) for r in results]
        store = self.gateway.store
        try:
            session = await store.session(principal.key, run.id, run.client)
            usage, windows = await usage_now(store, principal.key, policy_set)
        except StoreUnavailable:  # fail closed: the run's labels and counters cannot be seen
            return [Screened(r.call_id, r.tool.name, "store_unavailable", UNREAD) if checked else _unchecked(r)
                    for r, checked in looked]
        out: list[Screened] = []
        for result, checked in looked:
            out.append(self._one(policy_set, principal, run, session, (usage, windows), result) if checked else
                       _unchecked(result))
            if out[-1].ended is not None:
                break
        return out

    def _one(self, policy_set: PolicySet, principal: Principal, run: Run, session: SessionState,
             usage: tuple[dict[str, Totals], dict[str, Tallies]], result: AgentResult) -> Screened:
        """One result decided, its labels added, recorded once; what the model reads."""
        request = CallRequest(tool=result.tool.name, arguments=result.arguments, principal=principal,
                              session_id=run.id, run_client=run.client, call_id=result.call_id,
                              iteration=result.iteration, frontend="model", exposed=result.tool, call_id_given=False)
        trace = CallTrace(request, current_trace_id(), hand_out=True)
        trace.tool, trace.session = result.tool, session
        trace.upstream = {"status": "ok", "is_error": False, "ran_by": "agent"}
        sent = ToolResult([{"type": "text", "text": result.text}])
        outcome = withheld(result.call_id, sent.content, None, Profile.POLICY)
        decision: Decision | None = None
        if outcome is None:
            asked = request_stage_call(request, result.tool, session, usage[0], self.gateway.env, usage[1])
            call = trace.decided = replace(asked, stage=Stage.RESPONSE, original_args=result.arguments,
                                           result=as_result_info(sent))
            decision = decide(trace, policy_set, call, self.gateway.observer)
            outcome = self._outcome(session, decision, sent, result.call_id)
            outcome = add_labels(trace, self.gateway.store, Stage.RESPONSE, decision.labels, LABELS_FULL) or outcome
        outcome = self._record(policy_set, trace, session, outcome)
        return _screened(result, outcome, decision)

    def _outcome(self, session: SessionState, decision: Decision, sent: ToolResult, call_id: str) -> CallOutcome:
        """What the decision makes of the result (as ``Execution.respond`` does for a gateway-run tool)."""
        if decision.verdict is Verdict.REJECT:
            return refusal(call_id, "reject", decision.message or RESULT_WITHHELD)
        if decision.verdict is Verdict.TERMINATE:
            return refusal(call_id, "terminate", terminated_text(
                session, decision.message or ENDED, self.gateway.store.implicit_runs.idle_timeout), terminated=True)
        if not decision.rewritten:
            return tool_result(call_id, "allow", sent)
        final = from_response_stage(sent, decision.result)
        return withheld(call_id, final.content, final.structured, Profile.JSON) or \
            tool_result(call_id, "allow", final, rewritten=True)

    def _record(self, policy_set: PolicySet, trace: CallTrace, session: SessionState,
                outcome: CallOutcome) -> CallOutcome:
        """The first time a call id is seen in the run: write its event and count a refusal; a terminate ends the
        run every time (an admin may have reset it since). An event that cannot be written withholds the result
        (and ends nothing, as for any call whose outcome cannot be recorded)."""
        request, store = trace.request, self.gateway.store
        terminated = outcome.text if outcome.meta.get("gateway/terminated") else None
        key = (request.principal.key, request.session_id, request.call_id)
        if key in self._recorded:
            if terminated is not None:
                store.record_outcome(session, rejected=False, terminate_message=terminated, tool=request.tool)
            return outcome
        try:
            self.gateway.audit.write(_event(policy_set, trace, session, outcome, self.gateway.audit.redactor))
        except AuditWriteError:
            return refusal(outcome.call_id, "audit_failed", UNRECORDED)
        self._recorded[key] = None
        while len(self._recorded) > self._kept:
            self._recorded.popitem(last=False)
        store.record_outcome(session, rejected=outcome.decision in _REFUSED, terminate_message=terminated,
                             tool=request.tool)
        return outcome


def _event(policy_set: PolicySet, trace: CallTrace, session: SessionState, outcome: CallOutcome,
           redactor: Redactor) -> dict[str, Any]:
    """The ``call.result`` event: a ``call.outcome``'s fields (the result's decision) and, with flow rules, what
    the result added to the run (``flow``, as a gateway-run call's). The result's text is not in it (as no tool
    result is in the decision log)."""
    event = outcome_event(trace, trace.tool, session, outcome, policy_set.revision, redactor,
                          flow=policy_set.uses_flow)
    event["event"] = RESULT_EVENT
    return event


def _unchecked(result: AgentResult) -> Screened:
    """A result no response-stage rule reads: as sent."""
    return Screened(result.call_id, result.tool.name, "allow", checked=False)


def _screened(result: AgentResult, outcome: CallOutcome, decision: Decision | None) -> Screened:
    """What the model (or, for a terminate, the agent) reads."""
    name = result.tool.name
    if outcome.meta.get("gateway/terminated"):
        return Screened(result.call_id, name, outcome.decision, ended=outcome.text)
    if outcome.is_error or outcome.decision != "allow":
        return Screened(result.call_id, name, outcome.decision, outcome.text)
    if decision is None or not decision.rewritten:
        return Screened(result.call_id, name, "allow")
    text = outcome.text or (json.dumps(outcome.structured, ensure_ascii=False) if outcome.structured is not None
                            else "")
    return Screened(result.call_id, name, "allow", text, rewritten=True)
