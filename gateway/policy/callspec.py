"""The JSON/YAML shape of one call, shared by test cases and `gateway explain --call`.

    {tool, args, principal, session, usage, call, env, stage, result}

``tool`` is a name or a map {name, upstream, title, description, annotations, pinned, input_schema}; ``principal`` is
a map {id, groups, claims, kind, issuer} or (in a test suite) the name of a principal the suite declares.
``kind`` says how the caller was recognised: "key" when it names an id, "anonymous" when it names none;
"jwt" must give the token's ``issuer`` (the subject is then the id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from gateway.core.strict import StrictModel as _Strict
from gateway.policy.call import CallInfo, Principal, ResultInfo, SessionInfo, ToolCall, ToolInfo, UsageInfo
from gateway.policy.decision import Stage
from gateway.policy.schema_text import schema_text

__all__ = ["ANONYMOUS", "CallPrincipalSpec", "CallSpec", "PrincipalSpec", "ResultSpec", "SessionSpec", "ToolSpec",
           "with_anonymous_id"]

# Who a call or test case without a principal's id is made by.
ANONYMOUS = "anonymous"


class ToolSpec(_Strict):
    """A tool as a call names it."""

    name: str
    upstream: str = ""
    title: str = ""
    description: str = ""
    annotations: dict[str, Any] = Field(default_factory=dict)
    pinned: bool = False  # tool.pinned: it matches the tools lock
    input_schema: dict[str, Any] = Field(default_factory=dict)  # policies read its prose as tool.schema_text


# The one written form of a principal: a config key's (`auth.api_keys[].principal`, `auth.anonymous`), which
# must name its id, and a call's or test case's, where a map without one is ANONYMOUS's (with_anonymous_id).
# The docstring is the config schema's description of it.
class PrincipalSpec(_Strict):
    """Who a key belongs to."""

    id: str
    groups: list[str] = Field(default_factory=list)
    claims: dict[str, Any] = Field(default_factory=dict)


class CallPrincipalSpec(PrincipalSpec):
    """Who makes a call or test case, and how the gateway recognised them (a config key says neither: its
    kind is always "key")."""

    kind: Literal["key", "jwt", "anonymous"] = "key"
    issuer: str = Field("", validate_default=True)  # the token's issuer: required for kind "jwt", refused otherwise

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str, info: ValidationInfo) -> str:
        if (info.data.get("kind") == "jwt") != bool(value):
            raise ValueError("a principal of kind 'jwt' names its token's 'issuer', and only such a principal does")
        return value

    def to_principal(self) -> Principal:
        """The engine's principal (a token's subject is its id here: policies see the id, not the subject)."""
        return Principal(self.id, tuple(self.groups), self.claims, self.kind, self.issuer,
                         self.id if self.kind == "jwt" else "")


def with_anonymous_id(value: Any) -> Any:
    """A principal map of a call or test case, with ``id`` ANONYMOUS (and kind "anonymous") when it names
    none (other values as given)."""
    if isinstance(value, dict) and "id" not in value:
        return {"id": ANONYMOUS, "kind": "anonymous", **value}
    return value


class _TalliedSpec(_Strict):
    """Counters and tallies, as a run or a usage window holds them before the call."""

    calls: int = 0
    calls_by_tool: dict[str, int] = Field(default_factory=dict)
    rejected: int = 0
    tallies: dict[str, float | int] = Field(default_factory=dict)  # tally id -> its value (others: 0)
    seen: dict[str, list[str]] = Field(default_factory=dict)  # distinct tally id -> the values counted so far

    @field_validator("tallies")
    @classmethod
    def _numbers(cls, value: dict[str, float | int]) -> dict[str, float | int]:
        for tally, number in value.items():
            if isinstance(number, bool) or number < 0:
                raise ValueError(f"tally {tally!r} must be a number >= 0")
        return value

    def tally_values(self) -> dict[str, float | int]:
        """The tallies given, a distinct tally given only by its ``seen`` values counting them."""
        return {**{k: len(v) for k, v in self.seen.items()}, **self.tallies}


class SessionSpec(_TalliedSpec):
    """The run before the call: its counters, labels and tallies."""

    id: str = "test-session"
    started_at: str = "2026-01-01T00:00:00Z"
    implicit: bool = False
    labels: list[str] = Field(default_factory=list)  # every label added in the run so far


class UsageSpec(_TalliedSpec):
    """The principal's counts and tallies over one usage window (config `usage_windows`)."""


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

    def to_result(self) -> ResultInfo:
        """The engine's result."""
        return ResultInfo(self.is_error, self.text, self.structured, self.content)


class CallSpec(_Strict):
    """One call to decide."""

    tool: str | ToolSpec
    args: dict[str, Any] = Field(default_factory=dict)
    original_args: dict[str, Any] | None = None
    principal: str | CallPrincipalSpec = Field(
        default_factory=lambda: CallPrincipalSpec(id=ANONYMOUS, kind="anonymous"))
    session: SessionSpec = Field(default_factory=SessionSpec)
    usage: dict[str, UsageSpec] = Field(default_factory=dict)
    call: CallInfoSpec = Field(default_factory=CallInfoSpec)
    env: dict[str, Any] | None = None
    stage: Stage = Stage.REQUEST
    result: ResultSpec | None = None

    _anonymous = field_validator("principal", mode="before")(with_anonymous_id)

    def to_call(
        self,
        principals: Mapping[str, CallPrincipalSpec] | None = None,
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
            tool=ToolInfo(tool.name, tool.upstream, tool.title, tool.description, dict(tool.annotations),
                          pinned=tool.pinned, schema_text=schema_text(tool.input_schema)),
            args=self.args,
            original_args=self.original_args,
            principal=principal.to_principal(),
            session=SessionInfo(self.session.id, self.session.calls, self.session.calls_by_tool,
                                self.session.rejected, self.session.started_at, self.session.implicit,
                                list(self.session.labels), self.session.tally_values(),
                                {k: list(v) for k, v in self.session.seen.items()}),
            usage={name: UsageInfo(u.calls, dict(u.calls_by_tool), u.rejected, u.tally_values(),
                                   {k: list(v) for k, v in u.seen.items()}) for name, u in self.usage.items()},
            call=CallInfo(self.call.id, self.call.iteration, self.call.time),
            env={**(env or {}), **(self.env or {})},
            stage=self.stage,
            result=result.to_result() if result else None,
        )
