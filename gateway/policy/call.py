"""The engine's input: one tool call described as plain typed values.

The engine sees exactly these; transports build them. ``to_cel`` gives the maps that CEL
expressions read (``tool``, ``principal``, ``session``, ``usage``, ``call``, ``result``). Times are RFC 3339
strings; use ``timestamp(call.time)`` in CEL to compare them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.decision import Stage

__all__ = ["CallInfo", "Principal", "ResultInfo", "SessionInfo", "ToolCall", "ToolInfo", "UsageInfo"]


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """The tool as the gateway exposes it."""

    name: str
    upstream: str = ""
    title: str = ""
    description: str = ""
    annotations: dict[str, Any] = field(default_factory=dict)

    def to_cel(self) -> dict[str, Any]:
        """The ``tool`` map."""
        hints = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                 "openWorldHint": True}  # MCP's defaults for a tool that says nothing
        hints.update({k: v for k, v in self.annotations.items() if v is not None})
        return {"name": self.name, "upstream": self.upstream, "title": self.title,
                "description": self.description, "annotations": hints}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling."""

    id: str = "anonymous"
    groups: tuple[str, ...] = ()
    claims: dict[str, Any] = field(default_factory=dict)

    def to_cel(self) -> dict[str, Any]:
        """The ``principal`` map."""
        return {"id": self.id, "groups": list(self.groups), "claims": self.claims}


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Counters of the agent session the call belongs to (before this call)."""

    id: str = ""
    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    started_at: str = ""
    implicit: bool = False  # the gateway made the run up: the client named none (docs/runs.md)

    def to_cel(self) -> dict[str, Any]:
        """The ``session`` map."""
        return {"id": self.id, "calls": self.calls, "calls_by_tool": self.calls_by_tool,
                "rejected": self.rejected, "started_at": self.started_at, "implicit": self.implicit}


@dataclass(frozen=True, slots=True)
class UsageInfo:
    """The principal's calls over one configured rolling window, across all its runs (before this call)."""

    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0

    def to_cel(self) -> dict[str, Any]:
        """One entry of the ``usage`` map."""
        return {"calls": self.calls, "calls_by_tool": self.calls_by_tool, "rejected": self.rejected}


@dataclass(frozen=True, slots=True)
class CallInfo:
    """This call's identity within the agent loop."""

    id: str = ""
    iteration: int = 0
    time: str = ""

    def to_cel(self) -> dict[str, Any]:
        """The ``call`` map."""
        return {"id": self.id, "iteration": self.iteration, "time": self.time}


@dataclass(frozen=True, slots=True)
class ResultInfo:
    """A tool's result, as response-stage rules see it."""

    is_error: bool = False
    text: str = ""
    structured: Any = None
    content: list[dict[str, Any]] = field(default_factory=list)

    def to_cel(self) -> dict[str, Any]:
        """The ``result`` map."""
        return {"is_error": self.is_error, "text": self.text, "structured": self.structured,
                "content": self.content}

    @classmethod
    def from_cel(cls, data: dict[str, Any]) -> ResultInfo:
        """Back from the (possibly rewritten) map."""
        return cls(bool(data.get("is_error", False)), str(data.get("text") or ""),
                   data.get("structured"), list(data.get("content") or []))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Everything the engine needs to decide one call at one stage."""

    tool: ToolInfo
    args: dict[str, Any] = field(default_factory=dict)
    principal: Principal = field(default_factory=Principal)
    session: SessionInfo = field(default_factory=SessionInfo)
    call: CallInfo = field(default_factory=CallInfo)
    env: dict[str, Any] = field(default_factory=dict)
    stage: Stage = Stage.REQUEST
    result: ResultInfo | None = None
    original_args: dict[str, Any] | None = None  # defaults to args
    usage: Mapping[str, UsageInfo] = field(default_factory=dict)  # window name (config usage_windows) -> counts

    def usage_cel(self) -> dict[str, Any]:
        """The ``usage`` map."""
        return {name: info.to_cel() for name, info in self.usage.items()}
