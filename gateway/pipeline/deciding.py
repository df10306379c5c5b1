"""What the policies are asked at each stage of a call, and their answer when the engine fails (fail closed)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.core.clock import now_rfc3339
from gateway.observe.observer import CallObserver
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.request import CallRequest
from gateway.pipeline.results import POLICY_FAILED, as_result_info
from gateway.policy.call import CallInfo, SessionInfo, ToolCall, UsageInfo
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.flow import Tallies, TallyChange
from gateway.policy.policyset import PolicySet
from gateway.policy.tallies import TallyError
from gateway.store.model import SessionState
from gateway.store.usage import Totals
from gateway.upstreams.base import ToolResult
from gateway.upstreams.registry import ExposedTool

__all__ = ["decide", "evaluate", "evaluate_counted", "noted", "request_stage_call", "response_stage_call", "usage_info"]

log = logging.getLogger("gateway.pipeline")


def evaluate(policy_set: PolicySet, call: ToolCall) -> Decision:
    """The policies' decision on ``call``; a refusal if the engine raises (it should never: fail closed)."""
    try:
        return policy_set.decide(call)
    except Exception:
        return _engine_failed(policy_set, call)


def evaluate_counted(policy_set: PolicySet, call: ToolCall, counts: frozenset[Verdict]
                     ) -> tuple[Decision, TallyChange | TallyError | None]:
    """``PolicySet.decide_counted``: the decision and what admitting the call adds to its tallies; a refusal (that
    adds nothing) if the engine raises."""
    try:
        return policy_set.decide_counted(call, counts)
    except Exception:
        return _engine_failed(policy_set, call), None


def _engine_failed(policy_set: PolicySet, call: ToolCall) -> Decision:
    log.exception("policy evaluation raised for %s", call.tool.name)
    return Decision(Verdict.REJECT, call.stage, call.args, call.original_args or call.args,
                    policy_set.revision, POLICY_FAILED, "engine-error")


def decide(trace: CallTrace, policy_set: PolicySet, call: ToolCall, observer: CallObserver) -> Decision:
    """One stage's decision, timed into ``trace`` and told to the observer (metrics, a span)."""
    return noted(trace, evaluate(policy_set, call), observer)


def noted(trace: CallTrace, decision: Decision, observer: CallObserver) -> Decision:
    """A decision made elsewhere (in the store's admission, off the event loop) timed into ``trace`` and told."""
    trace.policy_us += decision.elapsed_us
    observer.decided(decision)
    trace.decisions.append(decision)
    return decision


def request_stage_call(request: CallRequest, tool: ExposedTool, session: SessionState, usage: Mapping[str, Totals],
                       env: dict[str, Any], windows: Mapping[str, Tallies] | None = None) -> ToolCall:
    """What the request-stage rules read: the tool, the arguments as sent, the run (its counters, labels, tallies
    and history), the principal's usage (with each window's tallies, from ``windows``)."""
    tallies, windows = session.tallies, windows or {}
    return ToolCall(
        tool=tool.info, args=request.arguments, principal=request.principal,
        session=SessionInfo(session.id, session.calls, dict(session.calls_by_tool), session.rejected,
                            session.started_at, session.implicit, list(session.labels), dict(tallies.values),
                            dict(tallies.seen), list(session.history)),
        call=CallInfo(request.call_id, session.calls if request.iteration is None else request.iteration,
                      now_rfc3339()), env=env,
        usage={name: usage_info(t, windows.get(name)) for name, t in usage.items()},
    )


def usage_info(totals: Totals | UsageInfo, tallies: Tallies | None) -> UsageInfo:
    """One usage window as rules read it: its counts, and its tallies if any."""
    if tallies is None:
        return UsageInfo(totals.calls, totals.calls_by_tool, totals.rejected)
    return UsageInfo(totals.calls, totals.calls_by_tool, totals.rejected, dict(tallies.values), dict(tallies.seen))


def response_stage_call(call: ToolCall, decision: Decision, result: ToolResult) -> ToolCall:
    """What the response-stage rules read: the request stage's input, the final arguments and the result."""
    return ToolCall(
        tool=call.tool, args=decision.args, original_args=call.args, principal=call.principal,
        session=call.session, usage=call.usage, call=call.call, env=call.env, stage=Stage.RESPONSE,
        result=as_result_info(result),
    )
