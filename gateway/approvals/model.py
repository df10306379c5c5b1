"""What an approval request is, and who may decide it.

    pending ──approve (all requirements met)──▶ approved ──run once──▶ executing ──▶ executed
       │└──deny──▶ denied
       └──timeout──▶ expired

A request is bound to the call id *and* a digest of the final arguments: the same call id with
other arguments is a different request, so an approval can never be replayed for new arguments.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.policy.call import Principal

__all__ = ["Approval", "ApprovalState", "Requirement", "Vote", "args_digest", "qualifies"]


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


def qualifies(approver: Principal, approvers: list[str]) -> bool:
    """Whether ``approver`` is one of ``approvers`` ("group:NAME", "user:ID" or a bare id).

    An empty list means any authenticated approver.
    """
    if not approvers:
        return True
    for entry in approvers:
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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"rule": self.rule, "message": self.message, "approvers": self.approvers,
                "satisfied_by": self.satisfied_by, "via": self.via}


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

    def redacted(self, redact: Callable[[Any], Any]) -> Approval:
        """A copy whose arguments went through ``redact``: the copy that is stored, listed and announced.

        The digest stays that of the real final arguments, and the call runs with the arguments its
        caller sends again (which must match the digest), so the real values are never needed here.
        """
        return dataclasses.replace(self, original_args=redact(self.original_args),
                                   final_args=redact(self.final_args))

    def to_dict(self) -> dict[str, Any]:
        """The API's view of an approval."""
        return {
            "id": self.id, "call_id": self.call_id, "args_digest": self.digest, "state": str(self.state),
            "principal": {"id": self.principal.id, "groups": list(self.principal.groups)},
            "session": self.session_id, "tool": self.tool, "original_args": self.original_args,
            "final_args": self.final_args, "requirements": [r.to_dict() for r in self.requirements],
            "created_at": self.created_at, "expires_at": self.expires_at, "on_timeout": self.on_timeout,
            "votes": [v.to_dict() for v in self.votes], "decided_at": self.decided_at,
        }
