"""The seam where a call that needs approval waits for one.

The gateway hands a ``HeldCall`` to an ``ApprovalGate`` and gets an ``ApprovalResult`` back.
``NoApprovals`` is the gate when no approval service is configured: it refuses, failing closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.pipeline.request import CallRequest
from gateway.policy.decision import Decision
from gateway.upstreams.registry import ExposedTool

__all__ = ["ApprovalGate", "ApprovalResult", "HeldCall", "NoApprovals", "Recheck"]

# The call decided again by the policies in force now; ``decision`` itself when they have not changed.
Recheck = Callable[[], Decision]


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
