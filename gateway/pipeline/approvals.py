"""The seam where a call that needs approval waits for one.

The gateway hands a ``HeldCall`` to an ``ApprovalGate`` and gets an ``ApprovalResult`` back.
``NoApprovals`` is the gate when no approval service is configured: it refuses, failing closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.pipeline.request import CallRequest
from gateway.policy.call import Principal
from gateway.policy.decision import Decision
from gateway.upstreams.registry import ExposedTool

__all__ = ["ApprovalGate", "ApprovalResult", "EditAsk", "EditedCall", "HeldCall", "NoApprovals", "Recheck", "Redecide",
           "ReleasedEdit"]

# The call decided again by the policies in force now; ``decision`` itself when they have not changed.
Recheck = Callable[[], Decision]
# The call with other arguments (an approver's edit) decided by the policies in force now, on the call's own run.
Redecide = Callable[[dict[str, Any]], Decision]


@dataclass(frozen=True, slots=True)
class HeldCall:
    """A call whose verdict is approve (``tool.upstream`` says whose tool it is: an approval is for one)."""

    request: CallRequest
    tool: ExposedTool
    decision: Decision
    # Asked before an approved request is claimed: a reload while the call waited may have made its rule
    # stricter, and an approval releases only a call whose current requirements it covers.
    recheck: Recheck | None = None
    answer_now: bool = False  # the principal's held calls are at their share: answer "pending" without waiting
    # Asked when an approval that an approver edited is claimed: the edited call, decided again (gate, edits.py).
    redecide: Redecide | None = None


@dataclass(frozen=True, slots=True)
class ReleasedEdit:
    """An approved call that an approver edited: it runs as ``decision`` (the edited arguments, decided again)."""

    decision: Decision
    arguments: dict[str, Any]  # the approver's arguments (``decision.args``: what the policies made of them)
    by: str  # who edited and approved it


@dataclass(frozen=True, slots=True)
class EditAsk:
    """An approver's edit of a held call: the call's principal, run, exposed tool, upstream and call id (the agent's,
    not the approver's), and the arguments the approver would run it with."""

    principal: Principal
    run: str
    tool: str
    upstream: str
    call_id: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EditedCall:
    """What the gateway makes of an approver's edit before it is approved: the request-stage decision on the edited
    arguments, or (``problem``) why they cannot be decided (values, size, input schema, the tool or run gone)."""

    decision: Decision | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalResult:
    """What became of a held call: approved, or refused with a message for the model."""

    approved: bool
    message: str | None = None
    approval_id: str | None = None
    pending: bool = False  # the caller stopped waiting; the approval is still open
    replay: dict[str, Any] | None = None  # the stored result of the one execution, for a retry
    decision: str = "reject"  # the refusal's decision name when not approved ("store_unavailable", ...)
    expires_at: str | None = None  # while pending: when the request expires unless decided
    edit: ReleasedEdit | None = None  # approved with an approver's edit: what runs instead of the call as asked


class ApprovalGate(Protocol):
    """Something that can hold a call until people decide."""

    async def hold(self, held: HeldCall) -> ApprovalResult:
        """Wait for the decision (or until the caller stops waiting)."""
        ...

    async def executed(self, approval_id: str, result: dict[str, Any]) -> None:
        """Record the result of the one execution an approval allowed."""
        ...

    async def released(self, approval_id: str) -> None:
        """The execution never reached the upstream: the approval may be used again."""
        ...

    async def orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        """For a retry whose tool is gone: the outcome of its approval, if it has one."""
        ...


class NoApprovals:
    """No approval service: every call that needs approval is refused."""

    async def hold(self, held: HeldCall) -> ApprovalResult:
        """Refuse, naming why."""
        return ApprovalResult(False, "This call needs approval, and this gateway has no approval service.")

    async def executed(self, approval_id: str, result: dict[str, Any]) -> None:
        """Nothing to record."""
        del approval_id, result

    async def released(self, approval_id: str) -> None:
        """Nothing to release."""
        del approval_id

    async def orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        """No approvals, so nothing is ever orphaned."""
        del principal_id, call_id, tool
        return None
