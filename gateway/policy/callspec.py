"""The JSON/YAML shape of one call, shared by test cases and `gateway explain --call`.

    {tool, args, principal, session, usage, call, env, stage, result}

``tool`` is a name or a map {name, upstream, title, description, annotations}; ``principal`` is
a map or (in a test suite) the name of a principal the suite declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from gateway.core.strict import StrictModel as _Strict
from gateway.policy.call import CallInfo, Principal, ResultInfo, SessionInfo, ToolCall, ToolInfo, UsageInfo
from gateway.policy.decision import Stage

__all__ = ["ANONYMOUS", "CallSpec", "PrincipalSpec", "ToolSpec", "with_anonymous_id"]

# Who a call or test case without a principal's id is made by.
ANONYMOUS = "anonymous"


class ToolSpec(_Strict):
    """A tool as a call names it."""

    name: str
    upstream: str = ""
    title: str = ""
    description: str = ""
    annotations: dict[str, Any] = Field(default_factory=dict)


# The one written form of a principal: a config key's (`auth.api_keys[].principal`, `auth.anonymous`), which
# must name its id, and a call's or test case's, where a map without one is ANONYMOUS's (with_anonymous_id).
# The docstring is the config schema's description of it.
class PrincipalSpec(_Strict):
    """Who a key belongs to."""

    id: str
    groups: list[str] = Field(default_factory=list)
    claims: dict[str, Any] = Field(default_factory=dict)


def with_anonymous_id(value: Any) -> Any:
    """A principal map of a call or test case, with ``id`` ANONYMOUS when it names none (other values as given)."""
    return {"id": ANONYMOUS, **value} if isinstance(value, dict) else value


class SessionSpec(_Strict):
    """Session counters before the call."""

    id: str = "test-session"
    calls: int = 0
    calls_by_tool: dict[str, int] = Field(default_factory=dict)
    rejected: int = 0
    started_at: str = "2026-01-01T00:00:00Z"
    implicit: bool = False


class UsageSpec(_Strict):
    """The principal's counts over one usage window (config `usage_windows`)."""

    calls: int = 0
    calls_by_tool: dict[str, int] = Field(default_factory=dict)
    rejected: int = 0


class CallInfoSpec(_Strict):
    """The call's id and iteration."""

    id: str = "call-1"
    iteration: int = 0
    time: str = "2026-01-01T12:00:00Z"


class ResultSpec(_Strict):
    """A tool result, for response-stage cases."""

    is_error: bool = False
    text: str = ""
    structured: Any = None
    content: list[dict[str, Any]] = Field(default_factory=list)


class CallSpec(_Strict):
    """One call to decide."""

    tool: str | ToolSpec
    args: dict[str, Any] = Field(default_factory=dict)
    original_args: dict[str, Any] | None = None
    principal: str | PrincipalSpec = Field(default_factory=lambda: PrincipalSpec(id=ANONYMOUS))
    session: SessionSpec = Field(default_factory=SessionSpec)
    usage: dict[str, UsageSpec] = Field(default_factory=dict)
    call: CallInfoSpec = Field(default_factory=CallInfoSpec)
    env: dict[str, Any] | None = None
    stage: Stage = Stage.REQUEST
    result: ResultSpec | None = None

    _anonymous = field_validator("principal", mode="before")(with_anonymous_id)

    def to_call(
        self,
        principals: Mapping[str, PrincipalSpec] | None = None,
        tools: Mapping[str, ToolSpec] | None = None,
        env: Mapping[str, Any] | None = None,
    ) -> ToolCall:
        """The engine input; named principals and tools resolve through the given fixtures."""
        tool = self.tool
        if isinstance(tool, str):
            tool = (tools or {}).get(tool) or ToolSpec(name=tool)
        principal = self.principal
        if isinstance(principal, str):
            known = principals or {}
            if principal not in known:
                raise KeyError(f"unknown principal {principal!r}; declare it under 'principals'")
            principal = known[principal]
        result = self.result
        if self.stage is Stage.RESPONSE and result is None:
            result = ResultSpec()
        return ToolCall(
            tool=ToolInfo(tool.name, tool.upstream, tool.title, tool.description, dict(tool.annotations)),
            args=self.args,
            original_args=self.original_args,
            principal=Principal(principal.id, tuple(principal.groups), principal.claims),
            session=SessionInfo(self.session.id, self.session.calls, self.session.calls_by_tool,
                                self.session.rejected, self.session.started_at, self.session.implicit),
            usage={name: UsageInfo(u.calls, dict(u.calls_by_tool), u.rejected) for name, u in self.usage.items()},
            call=CallInfo(self.call.id, self.call.iteration, self.call.time),
            env={**(env or {}), **(self.env or {})},
            stage=self.stage,
            result=ResultInfo(result.is_error, result.text, result.structured, result.content) if result else None,
        )
