"""A call's two audit events: ``call.intent`` before its tool can act, ``call.outcome`` once it has an outcome.

Both start with the head every event has (gateway/core/audit_head.py: event, id, time, trace_id), then
the call's own head (call id, iteration, frontend, principal, session, tool, upstream, task). Values are
redacted here, and the JSON Pointers of what was replaced go in ``redacted``. Each event is one dict,
encoded once by the audit log.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.pipeline.audit import Redactor
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.request import CallOutcome
from gateway.policy.call import ToolCall
from gateway.policy.decision import Decision
from gateway.policy.policyset import env_revision
from gateway.store.model import SessionState
from gateway.upstreams.registry import ExposedTool

__all__ = ["flow_record", "intent_event", "outcome_event"]


def _call_head(kind: str, trace: CallTrace, tool: ExposedTool | None, session: SessionState | None) -> dict[str, Any]:
    request = trace.request
    # Added to the event head in place (no second dict made and spread: this is written twice per call).
    head = audit_head(kind, now_rfc3339(), trace.trace_id, trace.audit_id)
    head["call_id"] = request.call_id
    head["iteration"] = request.iteration
    head["frontend"] = request.frontend
    head["principal"] = request.principal.to_record()  # kind, issuer, subject, token id hash: never the token
    head["session"] = session.id if session is not None else request.session_id
    head["tool"] = request.tool
    head["upstream"] = tool.upstream.name if tool else None
    if request.task_id is not None:
        head["task"] = request.task_id
    return head


def intent_event(trace: CallTrace, tool: ExposedTool, decision: Decision, revision: str,
                 redactor: Redactor) -> dict[str, Any]:
    """The record written before the tool runs: who asks to run what, with which arguments, and why."""
    final, redacted = redactor.apply(decision.args, "/final_args")
    assert trace.session is not None
    return {
        **_call_head("call.intent", trace, tool, trace.session),
        "final_args": final,
        "verdict": str(decision.verdict),
        "rewritten": decision.rewritten,
        "decided_by": [d.decided_by for d in trace.decisions if d.decided_by],
        "approval": trace.approval,
        "revision": revision,
        "redacted": redacted,
    }


def outcome_event(trace: CallTrace, tool: ExposedTool | None, session: SessionState | None, outcome: CallOutcome,
                  revision: str, redactor: Redactor, *, flow: bool = False) -> dict[str, Any]:
    """The record of what became of the call (exactly one per call); with ``flow`` (the policies keep labels or
    tallies) what it added to the run."""
    request = trace.request
    original, redacted_original = redactor.apply(request.arguments, "/original_args")
    final_args = trace.decisions[0].args if trace.decisions else request.arguments
    edit: dict[str, Any] = {}
    if trace.edit is not None:  # an approver edited the arguments: they, and what ran, on the record
        final_args = trace.edit["final_args"]
        edit["edited_args"] = redactor.apply(trace.edit["edited_args"], "/edited_args", redacted_original)[0]
        edit["edited_by"] = trace.edit["by"]
    final, redacted_final = redactor.apply(final_args, "/final_args")
    context, redacted_context = _replay_context(trace, redactor)
    flows, redacted_flow = redactor.apply(flow_record(trace, session), "/flow") if flow else (None, [])
    return {
        **_call_head("call.outcome", trace, tool, session),
        "original_args": original,
        **edit,
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
        "revision": revision,
        "redacted": redacted_original + redacted_final + redacted_context + redacted_flow,
        **({"context": context} if context is not None else {}),
        **({"flow": flows} if flow else {}),
    }


def flow_record(trace: CallTrace, session: SessionState | None) -> dict[str, Any]:
    """The ``flow`` object: the labels this call added by stage, the run's labels after it, and the tallies it
    moved, before and after (gateway/pipeline/flow_step.py)."""
    added = trace.labels_added
    return {"labels_added": {"request": added.get("request", []), "response": added.get("response", [])},
            "labels": list(session.labels) if session is not None else [],
            "tallies": dict(trace.tallies)}


def _replay_context(trace: CallTrace, redactor: Redactor) -> tuple[dict[str, Any] | None, list[str]]:
    """What `gateway replay` needs to decide the call again: the rest of the request-stage input."""
    call = trace.decided
    if call is None or not trace.decisions:
        return None, []  # refused before any policy saw it: nothing to replay
    decision = trace.decisions[0]
    extra = {"usage": call.usage_cel()} if call.usage else {}  # the principal's rolling windows
    return redactor.apply({
        "tool": {"title": call.tool.title, "description": call.tool.description,
                 "annotations": call.tool.annotations, "schema_text": call.tool.schema_text,
                 **({"pinned": True} if call.tool.pinned else {})},
        "principal_claims": call.principal.claims,
        "session": _session_context(call),
        "call_time": call.call.time,
        "env_revision": trace.env_revision or env_revision(call.env),
        "stage": str(decision.stage),
        "policy_verdict": str(decision.verdict),
        "policy_decided_by": decision.decided_by,
        **extra,
    }, "/context")


def _session_context(call: ToolCall) -> dict[str, Any]:
    """The run as the call's rules read it, for a replay that starts mid-run: its counters, labels and tallies
    before the call. Not its history: up to 64 entries on every event, and the log holds those calls itself."""
    session = call.session.to_cel()
    session.pop("history", None)
    return session
