"""Run a test case's calls in order, each decided with the run the calls before it left.

One step is one call through the pipeline's stages, without a store or an upstream: the request-stage decision;
for an approve verdict, the person's answer the step gives (``pending`` holds it: not counted); if the call is
admitted, its tallies (gateway/testing/run_state.py) and request-stage labels; then, when the step gives the tool's
``result``, the response-stage decision and its labels; last, the run counts the call and keeps its history entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.policy.call import ToolCall
from gateway.policy.callspec import CallInfoSpec, CallPrincipalSpec, ToolSpec
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.explain import INVALID_INPUT
from gateway.policy.flow import LabelOverflow
from gateway.policy.policyset import PolicySet
from gateway.testing.run_state import LABELS_REFUSED, RunState, Window
from gateway.testing.suite import Case, Step

__all__ = ["TERMINATED", "Fixtures", "StepOutcome", "run_steps"]

# What a step after a terminate is answered (the gateway refuses every call of an ended run before any policy).
TERMINATED = "terminated"

# Called with each decision a step makes (`gateway test --coverage` watches with it).
Observer = Callable[[PolicySet, ToolCall, Decision], None]

_REFUSED = frozenset({Verdict.REJECT, Verdict.TERMINATE})


@dataclass(slots=True)
class StepOutcome:
    """What became of one step: the verdict a case expects, the stages' decisions, and the run after it."""

    verdict: str  # a Verdict, or INVALID_INPUT / TERMINATED (refused before any policy)
    message: str | None = None
    request: Decision | None = None
    response: Decision | None = None
    labels: list[str] = field(default_factory=list)  # what the step's rules added, both stages, in order
    tallies: dict[str, float | int] = field(default_factory=dict)  # the run's tallies after the step

    @property
    def decisions(self) -> list[Decision]:
        """The stages' decisions, in order."""
        return [d for d in (self.request, self.response) if d is not None]


@dataclass(slots=True)
class Fixtures:
    """What a suite declares for its cases' calls to name."""

    principals: Mapping[str, CallPrincipalSpec]
    tools: Mapping[str, ToolSpec]
    env: Mapping[str, Any]


def run_steps(policy_set: PolicySet, case: Case, fixtures: Fixtures,
              observe: Observer | None = None) -> tuple[list[StepOutcome], RunState]:
    """Every step of ``case`` in order (raises on a call that cannot be built, such as an unknown principal)."""
    steps = case.as_steps()
    calls = [_call_of(case, step, n, len(steps), fixtures) for n, step in enumerate(steps, 1)]
    start = calls[0].session
    state = RunState.from_session(start)
    state.windows = {name: Window.of(usage) for name, usage in calls[0].usage.items()}
    outcomes = []
    for step, call in zip(steps, calls, strict=True):
        outcome = _step(policy_set, state, replace(call, session=start), step, observe)
        outcome.tallies = dict(state.tallies.with_zeros(policy_set.zero).values)
        outcomes.append(outcome)
    return outcomes, state


def _call_of(case: Case, step: Step, n: int, count: int, fixtures: Fixtures) -> ToolCall:
    spec = step.call
    update: dict[str, Any] = {}
    if case.principal is not None and "principal" not in spec.model_fields_set:
        update["principal"] = case.principal
    if count > 1 and "call" not in spec.model_fields_set:
        update["call"] = CallInfoSpec(id=f"call-{n}", iteration=n - 1)
    if update:
        spec = spec.model_copy(update=update)
    return spec.to_call(fixtures.principals, fixtures.tools, fixtures.env)


def _step(policy_set: PolicySet, state: RunState, call: ToolCall, step: Step,
          observe: Observer | None) -> StepOutcome:
    if state.terminated:
        return StepOutcome(TERMINATED, "The run was ended by an earlier step.")
    refused = call.refused_at_door()
    if refused:
        return StepOutcome(INVALID_INPUT, refused)  # as the gateway does: no rule considered, nothing counted
    call = replace(call, session=state.session(call.session, policy_set.zero), usage=state.usage(policy_set.zero))
    if call.stage is Stage.RESPONSE:  # a one-call case decided at the response stage: the result is given
        return _response_only(policy_set, state, call, observe)
    request = _decide(policy_set, call, observe)
    out = StepOutcome(str(request.verdict), request.message, request)
    tool, time, verdict = call.tool.name, call.call.time, request.verdict
    if verdict is Verdict.APPROVE and step.approval != "approved":
        if step.approval == "denied":  # answered, so counted: refused, as the gateway answers a denial
            state.record(tool, str(Verdict.REJECT), request.decided_by, [], time, rejected=True)
        return out  # pending: held, not a call yet
    if verdict is not Verdict.ALLOW and verdict is not Verdict.APPROVE:  # reject, terminate, skip: nothing runs
        state.record(tool, str(verdict), request.decided_by, [], time, rejected=verdict in _REFUSED)
        state.terminated = verdict is Verdict.TERMINATE
        return out
    refused_by = state.admit(policy_set, call, request)
    refusal = refused_by.message if refused_by is not None else _labelled(state, request.labels)
    if refusal is not None:
        out.verdict, out.message = str(Verdict.REJECT), refusal
        rule = refused_by.decided_by if refused_by is not None else request.decided_by
        state.record(tool, str(Verdict.REJECT), rule, [], time, rejected=True)
        return out
    out.labels = list(request.labels)
    ended, rule = str(Verdict.ALLOW), request.decided_by
    if step.result is not None:
        # as the pipeline builds it: the request stage's input (the run as the call found it), the final arguments
        answer = replace(call, stage=Stage.RESPONSE, args=request.args, original_args=call.args,
                         result=step.result.to_result())
        out.response = response = _decide(policy_set, answer, observe)
        refusal = _labelled(state, response.labels)
        out.labels = list(dict.fromkeys([*out.labels, *response.labels]))
        if refusal is not None:
            out.verdict, out.message, ended = str(Verdict.REJECT), refusal, str(Verdict.REJECT)
        elif response.verdict in _REFUSED:
            out.verdict, out.message, ended = str(response.verdict), response.message, str(response.verdict)
            rule = response.decided_by
            state.terminated = response.verdict is Verdict.TERMINATE
    state.record(tool, ended, rule, out.labels, time, rejected=ended != str(Verdict.ALLOW))
    return out


def _response_only(policy_set: PolicySet, state: RunState, call: ToolCall, observe: Observer | None) -> StepOutcome:
    response = _decide(policy_set, call, observe)
    out = StepOutcome(str(response.verdict), response.message, response=response, labels=list(response.labels))
    refusal = _labelled(state, response.labels)
    if refusal is not None:
        out.verdict, out.message = str(Verdict.REJECT), refusal
    return out


def _decide(policy_set: PolicySet, call: ToolCall, observe: Observer | None) -> Decision:
    decision = policy_set.decide(call)
    if observe is not None:
        observe(policy_set, call, decision)
    return decision


def _labelled(state: RunState, labels: tuple[str, ...]) -> str | None:
    """Add ``labels`` to the run; the refusal when that would take it past its limit."""
    try:
        state.add_labels(labels)
    except LabelOverflow:
        return LABELS_REFUSED
    return None

