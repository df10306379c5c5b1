"""What an approval request is, and who may decide it.

    pending ──approve (all requirements met)──▶ approved ──claim──▶ executing ──▶ executed
       │└──deny──▶ denied                          ▲   │                  │
       └──timeout──▶ expired                       │   └──valid_for over──▶ expired (retired)
                                                   └── upstream not reached ┘

A request is bound to (principal, exposed tool name, call id, digest of the final arguments): a
call that differs in any of them is a different request, so an approval can never be replayed
for another tool or other arguments. An approved request may be executed for ``valid_for``
seconds after its decision; a request that lapsed is *retired* (it no longer holds its key), so
the next call with that key asks afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.core.clock import rfc3339
from gateway.core.limits import DEFAULT_APPROVAL_VALID_SECONDS
from gateway.pipeline.results import REFUSED_AT_RELEASE
from gateway.policy.call import Principal
from gateway.policy.decision import REQUESTER, Decision

__all__ = ["POLICY_CHANGE", "Approval", "ApprovalState", "Binding", "Edit", "Requirement", "Vote", "args_digest",
           "audience_of", "json_safe", "qualifies", "requirements_of", "seen_as", "uncovered"]

# The voter recorded when a request is set aside because the policies now need approvers it did not have.
POLICY_CHANGE = "policy"


class ApprovalState(StrEnum):
    """Where an approval request is in its life."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    EXECUTING = "executing"
    EXECUTED = "executed"


FINAL_STATES = frozenset({ApprovalState.DENIED, ApprovalState.EXPIRED, ApprovalState.EXECUTED})


def args_digest(arguments: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the final arguments."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON can carry it: NaN and ±Infinity become the strings "NaN", "Infinity",
    "-Infinity", and anything JSON has no form for becomes its text.

    Used for the stored and displayed copy of an approval only; its digest is over the real arguments.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return str(value)


def audience_of(approvers: list[str]) -> list[str]:
    """Who may decide a requirement on the page, as ``qualifies`` reads it: "group:NAME", "user:ID", "*" for
    anyone (``self``, the requester, answers only through their client and is not in it)."""
    if not approvers:
        return ["*"]
    return [entry if entry.partition(":")[2] else f"user:{entry}" for entry in approvers if entry != REQUESTER]


def seen_as(approver: Principal) -> list[str]:
    """The audience entries that name ``approver`` (the other side of ``audience_of``)."""
    return ["*", f"user:{approver.id}", *(f"group:{g}" for g in approver.groups)]


def qualifies(approver: Principal, approvers: list[str]) -> bool:
    """Whether ``approver`` is one of ``approvers`` ("group:NAME", "user:ID" or a bare id).

    An empty list means any authenticated approver.
    """
    if not approvers:
        return True
    for entry in approvers:
        if entry == REQUESTER:  # the requester's own client, never an approver on the page
            continue
        kind, _, name = entry.partition(":")
        if not name:
            kind, name = "user", entry
        if (kind == "group" and name in approver.groups) or (kind == "user" and name == approver.id):
            return True
    return False


@dataclass(slots=True)
class Requirement:
    """One fired approve rule; satisfied by the first qualified approver who approves."""

    rule: str
    message: str
    approvers: list[str]
    satisfied_by: str | None = None
    via: str = "page"  # "elicitation": the end user may answer through their MCP client

    @property
    def asks_requester(self) -> bool:
        """Whether the requester's own client may satisfy it: ``via: elicitation`` and ``self`` among its approvers."""
        return self.via == "elicitation" and REQUESTER in self.approvers

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"rule": self.rule, "message": self.message, "approvers": self.approvers,
                "satisfied_by": self.satisfied_by, "via": self.via}


def requirements_of(decision: Decision) -> list[Requirement]:
    """The requirements of a decision to approve, as a request records them (none satisfied yet)."""
    return [Requirement(a.rule, a.message or decision.message or "", list(a.approvers), None, a.via)
            for a in decision.approvals]


def uncovered(had: list[Requirement], needed: list[Requirement]) -> list[Requirement]:
    """The requirements in ``needed`` that a request made with ``had`` does not cover.

    One is covered by a requirement of the same rule whose approvers were no wider: everyone who could
    decide it then may decide it now (an empty list is anyone; ``self`` only counts if still named).
    """

    def covered(need: Requirement) -> bool:
        wanted = set(audience_of(need.approvers))
        return any(h.rule == need.rule and ("*" in wanted or set(audience_of(h.approvers)) <= wanted)
                   and (need.asks_requester or not h.asks_requester) for h in had)

    return [n for n in needed if not covered(n)]


class Binding(StrEnum):
    """What finds a request again when its call is retried."""

    CALL_ID = "call_id"  # the caller named the call: (principal, upstream, tool, call id, digest)
    RUN = "run"  # no call id, a named run: (principal, upstream, run, tool, digest)
    # No call id and no named run (an implicit run, which a client opening a session per call changes on
    # every call): (principal, upstream, tool, digest), whatever the run, until its outcome is given.
    PRINCIPAL = "principal"


@dataclass(slots=True)
class Vote:
    """One approver's decision, as recorded."""

    approver: str
    groups: list[str]
    approve: bool
    comment: str
    at: str
    rules: list[str] = field(default_factory=list)  # requirements this vote satisfied

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"approver": self.approver, "groups": self.groups, "approve": self.approve,
                "comment": self.comment, "at": self.at, "rules": self.rules}


@dataclass(frozen=True, slots=True)
class Edit:
    """An approver's edit of the arguments, approved with it: the call that runs is the edited one.

    ``arguments`` are the approver's, ``final_args`` what the request-stage policies made of them (their rewrites),
    and ``digest`` binds the release: the call runs only if the policies then still make exactly these of them.
    """

    by: str  # the approver who edited (and approved) it
    at: str
    arguments: dict[str, Any]
    final_args: dict[str, Any]
    digest: str
    verdict: str  # the policies' verdict on the edited call when it was approved: allow or approve
    decided_by: str | None = None  # the rule that set that verdict

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"by": self.by, "at": self.at, "arguments": self.arguments, "final_args": self.final_args,
                "digest": self.digest, "verdict": self.verdict, "decided_by": self.decided_by}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Edit:
        """Back from ``to_dict``."""
        return cls(str(data["by"]), str(data["at"]), dict(data["arguments"]), dict(data["final_args"]),
                   str(data["digest"]), str(data["verdict"]), data.get("decided_by"))


@dataclass(slots=True)
class Approval:
    """One approval request."""

    id: str
    call_id: str
    digest: str
    principal: Principal
    session_id: str
    tool: str
    original_args: dict[str, Any]
    final_args: dict[str, Any]
    requirements: list[Requirement]
    created_at: str
    expires_at: str
    expires_ts: float
    on_timeout: str  # "reject" | "allow"
    state: ApprovalState = ApprovalState.PENDING
    votes: list[Vote] = field(default_factory=list)
    result: dict[str, Any] | None = None  # the outcome returned to the caller, once executed or refused
    decided_at: str | None = None
    valid_for: float = DEFAULT_APPROVAL_VALID_SECONDS  # seconds an approved request may run after its decision
    decided_ts: float | None = None
    owner: str | None = None  # the gateway process executing it (while executing)
    lease_ts: float | None = None  # when that process's claim runs out unless renewed
    retired: bool = False  # no longer holds its key: the next call with it asks afresh
    # Bound by (principal, run, tool, digest) because the caller gave no call id: a retry of the same
    # call in the same run finds it until its outcome has been given to a caller.
    by_run: bool = False
    executed_at: str | None = None  # when the one execution's outcome was recorded
    upstream: str = ""  # the upstream of the tool it was asked for ("client": an agent-run tool); "" before 3
    across_runs: bool = False  # bound by (principal, upstream, tool, digest) whatever the run (Binding.PRINCIPAL)
    args_redacted: bool = False  # the stored arguments are a redacted copy: the gateway does not have them to edit
    edit: Edit | None = None  # the approver's edit, approved with it: the call runs with the edited arguments

    @property
    def binding(self) -> Binding:
        """What finds this request again (see ``Binding``)."""
        if not self.by_run:
            return Binding.CALL_ID
        return Binding.PRINCIPAL if self.across_runs else Binding.RUN

    @property
    def run_key(self) -> str:
        """The run that binds a run-bound request ("" when it is bound across the principal's runs)."""
        return "" if self.across_runs else self.session_id

    @property
    def valid_until_ts(self) -> float | None:
        """Until when an approved request may be executed (None while undecided)."""
        return None if self.decided_ts is None else self.decided_ts + self.valid_for

    def audience(self) -> list[str]:
        """Everyone who may decide some requirement of this request (see ``audience``)."""
        return sorted({e for r in self.requirements for e in audience_of(r.approvers)})

    def redacted(self, redact: Callable[[Any], Any]) -> Approval:
        """A copy whose arguments went through ``redact``: the copy that is stored, listed and announced.

        The digest stays that of the real final arguments, and the call runs with the arguments its
        caller sends again (which must match the digest), so the real values are never needed here (and a copy
        that lost some is marked ``args_redacted``: it cannot be edited).
        """
        original, final = redact(self.original_args), redact(self.final_args)
        lost = original != self.original_args or final != self.final_args
        return dataclasses.replace(self, original_args=original, final_args=final,
                                   args_redacted=self.args_redacted or lost)

    def to_dict(self) -> dict[str, Any]:
        """The API's view of an approval."""
        return {
            "id": self.id, "call_id": self.call_id, "args_digest": self.digest, "state": str(self.state),
            "principal": self.principal.to_record(),
            "session": self.session_id, "tool": self.tool, "upstream": self.upstream,
            "original_args": self.original_args, "final_args": self.final_args,
            "requirements": [r.to_dict() for r in self.requirements],
            "created_at": self.created_at, "expires_at": self.expires_at, "on_timeout": self.on_timeout,
            "votes": [v.to_dict() for v in self.votes], "decided_at": self.decided_at,
            "valid_for_seconds": self.valid_for,
            "valid_until": None if self.valid_until_ts is None else rfc3339(self.valid_until_ts),
            "bound_by": str(self.binding), "executed_at": self.executed_at,
            "execution": self.execution(), "args_redacted": self.args_redacted,
            "edit": None if self.edit is None else self.edit.to_dict(),
        }

    def execution(self) -> dict[str, Any]:
        """What became of the call itself, whatever the decision: {state, at, until, label} (and outcome).

        States: "awaiting_decision", "awaiting_call" (approved; runs when the agent calls again, until
        ``until``), "running", "ran", "refused_at_release" (approved, but its policies refused it when it was
        released: a cap filled while it waited; with the ``reason`` and the ``rule``), "expired_unused", "not_run"
        (denied, or nobody decided in time).
        """
        until = None if self.valid_until_ts is None else rfc3339(self.valid_until_ts)
        lapse = next((v for v in self.votes if v.approver == "validity"), None)
        if self.state is ApprovalState.PENDING:
            return _execution("awaiting_decision", None, self.expires_at, "waiting for a decision")
        if self.state is ApprovalState.APPROVED:
            return _execution("awaiting_call", self.decided_at, until,
                              f"approved, waiting for the agent to call again (until {until})")
        if self.state is ApprovalState.EXECUTING:
            return _execution("running", None, None, "running now")
        if self.state is ApprovalState.EXECUTED:
            outcome = _outcome_of(self.result)
            at = self.executed_at or self.decided_at
            refused = _refused_at_release(self.result)
            if refused is not None:
                reason = _text_of(self.result)
                return _execution("refused_at_release", at, None, f"refused when released at {at}: {reason}") | {
                    "outcome": outcome, "reason": reason, "rule": refused}
            return _execution("ran", at, None, f"ran at {at}: {outcome}") | {"outcome": outcome}
        superseded = next((v for v in self.votes if v.approver == POLICY_CHANGE), None)
        if superseded is not None:
            return _execution("superseded", superseded.at, None,
                              f"not run: set aside at {superseded.at} ({superseded.comment})")
        if lapse is not None:
            return _execution("expired_unused", lapse.at, until, f"expired unused at {lapse.at} ({lapse.comment})")
        return _execution("not_run", self.decided_at, None, "not run")


def _execution(state: str, at: str | None, until: str | None, label: str) -> dict[str, Any]:
    return {"state": state, "at": at, "until": until, "label": label}


def _outcome_of(result: dict[str, Any] | None) -> str:
    """A one-line account of a stored outcome: "ok", "tool error", or the refusal's decision and text."""
    if not result:
        return "no result recorded"
    if not result.get("is_error"):
        return "ok"
    decision = str(result.get("decision", ""))
    if decision in ("allow", "approve", "rewrite"):
        return "tool error"
    return f"{decision}: {_text_of(result)}"[:200]


def _text_of(result: dict[str, Any] | None) -> str:
    """The text of a stored outcome."""
    content = (result or {}).get("content")
    return " ".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))


def _refused_at_release(result: dict[str, Any] | None) -> str | None:
    """The rule that refused an approved call when it was released (the outcome's ``_meta`` says), else None."""
    meta = (result or {}).get("meta")
    rule = meta.get(REFUSED_AT_RELEASE) if isinstance(meta, dict) else None
    return str(rule) if rule is not None and result is not None and result.get("is_error") else None
