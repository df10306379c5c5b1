"""The shape of a policy file, as pydantic models (also the source of `gateway schema policy`).

Field names follow the ValidatingAdmissionPolicy habit security teams know: ``when``,
``message`` / ``messageExpression``, ordered ``variables``; per-rule ``on_error`` and ``mode``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from gateway.core.durations import parse_duration
from gateway.core.strict import StrictModel as _Strict
from gateway.policy.decision import Action, Mode, OnError, Stage

__all__ = [
    "ApprovalSpec",
    "PolicyFile",
    "RewriteSpec",
    "RuleDefaults",
    "RuleSpec",
    "TallySpec",
    "VariableSpec",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class RuleDefaults(_Strict):
    """Per-file defaults applied to rules that do not say otherwise."""

    on_error: OnError = OnError.DENY
    mode: Mode = Mode.ENFORCE


class VariableSpec(_Strict):
    """A named CEL value, evaluated in order; later variables and rules read it as variables.NAME."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    expression: str


class ApprovalSpec(_Strict):
    """Who must approve, and what happens if nobody does in time."""

    approvers: list[str] = Field(default_factory=list)
    timeout: str | int = "15m"
    on_timeout: Literal["reject", "allow"] = "reject"
    via: Literal["page", "elicitation"] = "page"
    # How long an approved call may still be run after the decision; None: 10m (limits.py).
    valid_for: str | int | None = None
    # How long an MCP call is held open before the gateway answers "pending, call again"; None: 4s (limits.py).
    hold: str | int | None = None

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | int) -> str | int:
        parse_duration(value)
        return value

    @field_validator("valid_for", "hold")
    @classmethod
    def _valid_for(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_duration(value)
        return value


class RewriteSpec(_Strict):
    """Argument (or, at the response stage, result) changes: set paths, remove paths, redact text."""

    set: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)
    redact: list[str] = Field(default_factory=list)


class RuleSpec(_Strict):
    """One rule of a policy file."""

    id: str = Field(pattern=_NAME)
    description: str = ""
    tools: list[str] | None = None
    # Resource reads (gateway URIs) and prompt gets (exposed names) the rule decides; a rule naming neither
    # these nor ``tools`` decides every tool call, as before (docs/gateway.md, "Resources and prompts").
    resources: list[str] | None = None
    prompts: list[str] | None = None
    stage: Stage = Stage.REQUEST
    when: str | None = None
    action: Action
    message: str | None = None
    messageExpression: str | None = None
    approval: ApprovalSpec | None = None
    rewrite: RewriteSpec | None = None
    result: Any = None
    resultExpression: str | None = None
    on_error: OnError | None = None
    mode: Mode | None = None
    # action label: the labels it adds to the run, given as a list or computed (a CEL list(string)); one of the two
    labels: list[str] | None = None
    labelsExpression: str | None = None


class TallySpec(_Strict):
    """A running value per run and per usage window: a ``sum`` of a number, or a ``distinct`` count of strings."""

    id: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")  # a CEL field name: session.tallies.ID
    description: str = ""
    tools: list[str]
    sum: str | None = None  # CEL: the number an admitted call adds
    distinct: str | None = None  # CEL: the string (or list of strings) an admitted call names


class PolicyFile(_Strict):
    """A policy file: a named, ordered set of rules with shared variables and defaults."""

    policy: str = Field(pattern=_NAME)
    description: str = ""
    default: Literal["allow", "reject"] | None = None
    defaults: RuleDefaults = Field(default_factory=RuleDefaults)
    variables: list[VariableSpec] = Field(default_factory=list)
    tallies: list[TallySpec] = Field(default_factory=list)
    rules: list[RuleSpec] = Field(default_factory=list)
