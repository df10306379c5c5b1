"""Admitting a call's values: only what policies, the tool and the frontends can carry exactly goes on."""

from __future__ import annotations

from typing import Any

from gateway.core.values import Profile, door_problem, problem
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.results import refusal
from gateway.upstreams.credentials import no_caller_token

__all__ = ["NO_CALLER_TOKEN", "input_problem", "no_token_refusal", "withheld"]

# The decision of a call refused because its caller has no verified token for an upstream that acts for its caller.
NO_CALLER_TOKEN = "caller_token_required"


def input_problem(request: CallRequest) -> str | None:
    """Why the values of a call cannot go to policies and the tool exactly as given, or None."""
    if request.refused is not None:
        return request.refused
    return door_problem(request.call_id, request.session_id, request.arguments)


def no_token_refusal(call_id: str, upstream: str) -> CallOutcome:
    """A call by a caller without a verified token to an upstream that acts on its caller's behalf: refused, not run."""
    return refusal(call_id, NO_CALLER_TOKEN, f"{no_caller_token(upstream)} The tool did not run.")


def withheld(call_id: str, content: Any, structured: Any, profile: Profile) -> CallOutcome | None:
    """A refusal in place of a result that holds a value the frontends (or policies) cannot carry exactly."""
    why = problem({"content": content, "structured": structured}, profile, where="/result")
    return None if why is None else refusal(call_id, "invalid_result", f"The tool's result was withheld: {why}.")
