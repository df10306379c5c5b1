"""What a request-stage verdict that ends the call where it is decided answers: reject, terminate or skip.

One mapping for both places a call is decided before it runs: the request stage, and the admission again of an
approved call when it is released (gateway/pipeline/flow_step.py), whose tallies may have moved while it waited.
"""

from __future__ import annotations

from gateway.core.values import Profile
from gateway.pipeline.admission import withheld
from gateway.pipeline.request import CallOutcome
from gateway.pipeline.results import refusal, skipped
from gateway.pipeline.run_end import terminated_text
from gateway.policy.decision import Decision, Verdict
from gateway.store.model import SessionState

__all__ = ["stopped"]


def stopped(call_id: str, session: SessionState, decision: Decision, idle_timeout: float) -> CallOutcome | None:
    """The outcome a reject, terminate or skip ends the call with; None for a verdict that lets it go on."""
    verdict, message = decision.verdict, decision.message or ""
    if verdict is Verdict.REJECT:
        return refusal(call_id, "reject", message)
    if verdict is Verdict.TERMINATE:
        return refusal(call_id, "terminate", terminated_text(session, message, idle_timeout), terminated=True)
    if verdict is Verdict.SKIP:
        outcome = skipped(call_id, decision.result)
        return withheld(call_id, outcome.content, outcome.structured, Profile.JSON) or outcome
    return None
