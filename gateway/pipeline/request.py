"""A call as a frontend hands it in, and the one outcome it gets back."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.call import Principal

__all__ = ["CallOutcome", "CallRequest", "Progress", "iteration_of", "new_call_id"]

# A frontend's way to tell a waiting caller what is happening (MCP progress notifications).
Progress = Callable[[str], Awaitable[None]]


def new_call_id() -> str:
    """A fresh call id for callers that did not give one."""
    return uuid.uuid4().hex


def iteration_of(value: Any) -> int:
    """The agent-loop iteration a frontend was given (0 when absent or not a number)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(slots=True)
class CallRequest:
    """One tool call from an agent."""

    tool: str
    arguments: dict[str, Any]
    principal: Principal
    session_id: str
    call_id: str = field(default_factory=new_call_id)
    iteration: int = 0
    progress: Progress | None = None
    frontend: str = "mcp"
    wait_seconds: float | None = None  # how long the caller will wait for an approval (None: until expiry)
    elicit: Any = None  # a frontend's way to ask the end user directly (MCP elicitation), if it has one


@dataclass(slots=True)
class CallOutcome:
    """What the model sees: MCP's CallToolResult fields plus the gateway's decision."""

    call_id: str
    decision: str
    is_error: bool
    content: list[dict[str, Any]]
    structured: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    pending_approval: str | None = None  # set when the caller stopped waiting for an approval

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    def to_rest(self) -> dict[str, Any]:
        """The REST frontend's response body."""
        return {"call_id": self.call_id, "decision": self.decision, "is_error": self.is_error,
                "content": self.content, "structured": self.structured, "meta": self.meta}
