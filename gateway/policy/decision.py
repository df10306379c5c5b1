"""What a decision is: small enums for outcome and action, and the plain decision object.

What happened to each rule (``Outcome``) is kept apart from what the gateway will do
(``Verdict``); ``failure_verdict`` is the one place that turns an evaluation error into an effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.core.limits import DEFAULT_APPROVAL_HOLD_SECONDS, DEFAULT_APPROVAL_VALID_SECONDS

__all__ = [
    "REQUESTER",
    "STRICTNESS",
    "Action",
    "ApprovalRequirement",
    "Decision",
    "Mode",
    "OnError",
    "Outcome",
    "RuleResult",
    "Stage",
    "Verdict",
    "failure_verdict",
]


class Stage(StrEnum):
    """When a rule runs: before the tool (request) or after it (response)."""

    REQUEST = "request"
    RESPONSE = "response"


class Action(StrEnum):
    """What a rule does when it fires."""

    ALLOW = "allow"
    REJECT = "reject"
    APPROVE = "approve"
    REWRITE = "rewrite"
    SKIP = "skip"
    TERMINATE = "terminate"
    LABEL = "label"  # adds labels to the run; contributes no verdict (gateway/policy/flow.py)


class Verdict(StrEnum):
    """What the gateway does with the call."""

    ALLOW = "allow"
    REJECT = "reject"
    APPROVE = "approve"
    SKIP = "skip"
    TERMINATE = "terminate"


class Outcome(StrEnum):
    """What happened when one rule was evaluated."""

    FIRED = "fired"
    NOT_FIRED = "not_fired"
    ERROR = "error"
    AUDIT = "audit"  # would have fired, but the rule is in audit mode


class OnError(StrEnum):
    """A rule's failure policy."""

    DENY = "deny"
    IGNORE = "ignore"


class Mode(StrEnum):
    """Whether a rule's effect is applied or only recorded."""

    ENFORCE = "enforce"
    AUDIT = "audit"


# The strictest verdict that fired wins.
STRICTNESS: dict[Verdict, int] = {
    Verdict.ALLOW: 0,
    Verdict.APPROVE: 1,
    Verdict.SKIP: 2,
    Verdict.REJECT: 3,
    Verdict.TERMINATE: 4,
}

# rewrite changes arguments but carries no verdict of its own.
ACTION_VERDICT: dict[Action, Verdict | None] = {
    Action.ALLOW: Verdict.ALLOW,
    Action.REJECT: Verdict.REJECT,
    Action.APPROVE: Verdict.APPROVE,
    Action.SKIP: Verdict.SKIP,
    Action.TERMINATE: Verdict.TERMINATE,
    Action.REWRITE: None,
    Action.LABEL: None,
}


def failure_verdict(on_error: OnError) -> Verdict | None:
    """The effect of a rule whose expression failed: fail closed unless the rule says ignore."""
    return Verdict.REJECT if on_error is OnError.DENY else None


# The approvers entry naming the requester (``approvers: [self]``): only their own client may answer for it,
# through MCP elicitation (``via: elicitation``). A user whose id is "self" is written ``user:self``.
REQUESTER = "self"


@dataclass(frozen=True, slots=True)
class ApprovalRequirement:
    """One fired ``approve`` rule: each is a separate requirement that must be satisfied."""

    rule: str
    message: str
    approvers: tuple[str, ...]
    timeout_seconds: float
    on_timeout: Verdict
    via: str
    valid_for_seconds: float = DEFAULT_APPROVAL_VALID_SECONDS  # how long an approval may be used
    hold_seconds: float = DEFAULT_APPROVAL_HOLD_SECONDS  # how long an MCP call is held before "pending"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "rule": self.rule,
            "message": self.message,
            "approvers": list(self.approvers),
            "timeout_seconds": self.timeout_seconds,
            "on_timeout": str(self.on_timeout),
            "via": self.via,
        }


@dataclass(slots=True)
class RuleResult:
    """One rule that matched the tool, and what became of it."""

    rule: str
    action: Action
    outcome: Outcome
    elapsed_us: float
    mode: Mode = Mode.ENFORCE
    message: str | None = None
    error: str | None = None
    effect: Verdict | None = None  # what this rule contributed to the verdict, if anything
    rewritten: bool = False
    labels: tuple[str, ...] = ()  # a label rule that fired (or would have, in audit mode): the labels it gives

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        out: dict[str, Any] = {
            "rule": self.rule,
            "action": str(self.action),
            "outcome": str(self.outcome),
            "mode": str(self.mode),
            "elapsed_us": round(self.elapsed_us, 1),
        }
        if self.message is not None:
            out["message"] = self.message
        if self.error is not None:
            out["error"] = self.error
        if self.effect is not None:
            out["effect"] = str(self.effect)
        if self.rewritten:
            out["rewritten"] = True
        if self.labels:
            out["labels"] = list(self.labels)
        return out


@dataclass(slots=True)
class Decision:
    """The answer for one call at one stage."""

    verdict: Verdict
    stage: Stage
    args: dict[str, Any]
    original_args: dict[str, Any]
    revision: str
    message: str | None = None
    decided_by: str | None = None  # the rule (or "default") that set the verdict
    result: Any = None  # skip: the synthetic result; response stage: the (rewritten) result
    approvals: list[ApprovalRequirement] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    elapsed_us: float = 0.0
    labels: tuple[str, ...] = ()  # what the stage's enforced label rules add to the run, in rule order, once each

    @property
    def rewritten(self) -> bool:
        """Whether any enforced rewrite changed the arguments (or the result)."""
        return any(r.rewritten for r in self.rules)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the shape `gateway explain --format json` prints)."""
        return {
            "decision": str(self.verdict),
            "stage": str(self.stage),
            "message": self.message,
            "decided_by": self.decided_by,
            "args": self.args,
            "original_args": self.original_args,
            "result": self.result,
            "approvals": [a.to_dict() for a in self.approvals],
            "rules": [r.to_dict() for r in self.rules],
            "revision": self.revision,
            "elapsed_us": round(self.elapsed_us, 1),
            "labels": list(self.labels),
        }
