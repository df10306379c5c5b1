"""Policy test suites: ``*_test.yaml`` files beside the policies they test.

    suite: payments                      # optional; defaults to the file name
    policies: [payments.yaml]            # optional; defaults to the suite's directory
    env: {stage: prod}                   # defaults for every case's env
    principals: {alice: {id: alice, groups: [finance]}}
    tools: {transfer: {name: payments_transfer, annotations: {destructiveHint: true}}}
    cases:
      - name: large transfer needs approval
        call: {tool: transfer, args: {amount: 20000}, principal: alice}
        expect:
          decision: approve              # allow | reject | approve | skip | terminate | invalid_input
          message: ...                   # exact
          args: {...}                    # the final arguments, exactly
          rules: {payments/large-transfer: fired}   # outcomes of the named rules
          result: {...}                  # the synthetic/rewritten result; maps compare as subsets
          labels: [untrusted]            # the labels the call added to the run (its rules gave), in order
          tallies: {transferred: 700.0}  # the run's tallies after the call (only those named)
      - name: a run of calls              # a sequence: each step decided with the run the steps before left
        principal: alice                 # the steps' principal (a step's call may name another)
        steps:
          - call: {tool: web_fetch, args: {url: "https://example.test"}}
            result: {text: "..."}        # the tool's result: the response stage runs on it
            expect: {decision: allow, labels: [untrusted]}
          - call: {tool: mail_send, args: {to: x@example.test}}
            approval: approved           # what a person answers an approve verdict: approved | denied | pending
            expect: {decision: approve}
        expect_run: {labels: [untrusted], tallies: {...}, seen: {...}, history_tools: [web_fetch, mail_send]}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gateway.core.diagnostics import Diagnostic
from gateway.core.sourcemap import YamlDocument
from gateway.core.strict import StrictModel as _Strict
from gateway.core.validation import validate_document
from gateway.policy.callspec import CallPrincipalSpec, CallSpec, ResultSpec, ToolSpec, with_anonymous_id
from gateway.policy.decision import Outcome, Stage, Verdict
from gateway.policy.load import read_document

__all__ = ["Case", "Expectation", "LoadedSuite", "RunExpectation", "Step", "SuiteFile", "load_suite"]


class Expectation(_Strict):
    """What a case expects of the decision; only the keys given are checked."""

    # invalid_input: the gateway refuses the call before any policy (a value policies cannot see exactly);
    # terminated: an earlier step of the sequence ended the run, so the gateway refuses the call before any policy
    decision: Verdict | Literal["invalid_input", "terminated"]
    message: str | None = None
    args: dict[str, Any] | None = None
    rules: dict[str, Outcome] = Field(default_factory=dict)
    result: Any = None
    approvers: list[str] | None = None
    labels: list[str] | None = None  # what the call's rules added to the run, both stages, in order
    tallies: dict[str, float | int] | None = None  # the run's tally values after the call (only those named)


class RunExpectation(_Strict):
    """What the run holds after the last step; only the keys given are checked."""

    labels: list[str] | None = None  # every label of the run, in the order added
    tallies: dict[str, float | int] | None = None  # only those named
    seen: dict[str, list[str]] | None = None  # a distinct tally's values, in the order first counted
    history_tools: list[str] | None = None  # the tools of session.history, oldest first


ApprovalAnswer = Literal["approved", "denied", "pending"]


class Step(_Strict):
    """One call of a sequence."""

    call: CallSpec
    result: ResultSpec | None = None  # the tool's result: when given (and the call runs), the response stage runs
    approval: ApprovalAnswer = "pending"  # what a person answers when the call is held for approval
    expect: Expectation | None = None

    @model_validator(mode="after")
    def _request_stage(self) -> Step:
        if self.call.stage is not Stage.REQUEST or self.call.result is not None:
            raise ValueError("a step's call is decided at the request stage; give the tool's result as the "
                             "step's 'result' (beside 'call') for the response stage")
        return self


class Case(_Strict):
    """One test case: one call (``call`` and ``expect``), or a sequence of ``steps``."""

    name: str
    principal: str | CallPrincipalSpec | None = None  # a sequence's steps' principal, unless a step's call names one
    steps: list[Step] | None = None  # (before call and expect: their checks read it)
    call: CallSpec | None = None
    expect: Expectation | None = Field(None, validate_default=True)
    expect_run: RunExpectation | None = None

    _anonymous = field_validator("principal", mode="before")(with_anonymous_id)

    @field_validator("expect")
    @classmethod
    def _expected(cls, value: Expectation | None, info: ValidationInfo) -> Expectation | None:
        # a one-call case says what it expects (a missing key, where the key goes)
        if value is None and info.data.get("call") is not None and info.data.get("steps") is None:
            raise PydanticCustomError("missing", "Field required")
        return value

    @model_validator(mode="after")
    def _shape(self) -> Case:
        if (self.call is None) == (self.steps is None):
            raise ValueError("a case gives either 'call' (with 'expect') or 'steps', not both or neither")
        if self.steps is not None:
            if self.expect is not None:
                raise ValueError("a sequence says what it expects per step ('steps[].expect') and of the run "
                                 "('expect_run'), not in 'expect'")
            if not self.steps:
                raise ValueError("'steps' is empty: give at least one step")
            _check_steps(self.steps)
        return self

    def as_steps(self) -> list[Step]:
        """The case's calls as steps (a one-call case is one step)."""
        if self.steps is not None:
            return self.steps
        assert self.call is not None
        return [Step.model_construct(call=self.call, result=None, approval="pending", expect=self.expect)]


def _check_steps(steps: list[Step]) -> None:
    for n, step in enumerate(steps, 1):
        for start in ("session", "usage"):
            if n > 1 and start in step.call.model_fields_set:
                raise ValueError(f"step {n}: only the first step's call may give {start!r} (the run's start); "
                                 "later steps see what the earlier ones left")


class SuiteFile(_Strict):
    """A whole suite file."""

    suite: str | None = None
    policies: list[str] | None = None
    env: dict[str, Any] = Field(default_factory=dict)
    principals: dict[str, CallPrincipalSpec] = Field(default_factory=dict)
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    cases: list[Case] = Field(default_factory=list)

    @field_validator("principals", mode="before")
    @classmethod
    def _anonymous(cls, value: Any) -> Any:
        return {name: with_anonymous_id(p) for name, p in value.items()} if isinstance(value, dict) else value


class LoadedSuite(BaseModel):
    """A validated suite with the positions of its cases."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: Path
    name: str
    spec: SuiteFile
    policy_paths: list[Path]
    case_lines: list[int]
    step_lines: list[list[int]]  # per case, each step's line (a one-call case: its call's)


def load_suite(path: Path) -> tuple[LoadedSuite | None, list[Diagnostic]]:
    """Read and validate one suite file."""
    doc, problems, _ = read_document(path)
    if doc is None:
        return None, problems
    if doc.data is None:
        return None, [*problems, Diagnostic("empty-file", "the test suite is empty", str(path))]
    spec, more = validate_document(SuiteFile, doc, _case_of(doc))
    if spec is None:
        return None, [*problems, *more]
    base = path.parent
    policy_paths = [base / p for p in spec.policies] if spec.policies else [base]
    name = spec.suite or path.name.removesuffix(".yaml").removesuffix(".yml").removesuffix("_test")
    lines = [doc.position(("cases", i)).line for i in range(len(spec.cases))]
    steps = [[doc.position(("cases", i, "steps", n)).line for n in range(len(c.steps))] if c.steps is not None
             else [doc.position(("cases", i, "call")).line] for i, c in enumerate(spec.cases)]
    return LoadedSuite(path=path, name=name, spec=spec, policy_paths=policy_paths, case_lines=lines,
                       step_lines=steps), problems


def _case_of(doc: YamlDocument):  # type: ignore[no-untyped-def]
    def case_of(loc: tuple[str | int, ...]) -> str | None:
        if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int) and isinstance(doc.data, dict):
            cases = doc.data.get("cases")
            if isinstance(cases, list) and loc[1] < len(cases) and isinstance(cases[loc[1]], dict):
                return f"case {cases[loc[1]].get('name', loc[1] + 1)!s}"
        return None
    return case_of
