"""Admitting a call's values: only what policies, the tool and the frontends can carry exactly goes on."""

from __future__ import annotations

from typing import Any

from gateway.core.values import Profile, door_problem, problem
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.results import refusal

__all__ = ["input_problem", "withheld"]


def input_problem(request: CallRequest) -> str | None:
    """Why the values of a call cannot go to policies and the tool exactly as given, or None."""
    if request.refused is not None:
        return request.refused
    return door_problem(request.call_id, request.session_id, request.arguments)


def withheld(call_id: str, content: Any, structured: Any, profile: Profile) -> CallOutcome | None:
    """A refusal in place of a result that holds a value the frontends (or policies) cannot carry exactly."""
    why = problem({"content": content, "structured": structured}, profile, where="/result")
    return None if why is None else refusal(call_id, "invalid_result", f"The tool's result was withheld: {why}.")
