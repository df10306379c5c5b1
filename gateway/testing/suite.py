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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.core.diagnostics import Diagnostic
from gateway.core.sourcemap import YamlDocument
from gateway.core.strict import StrictModel as _Strict
from gateway.core.validation import validate_document
from gateway.policy.callspec import CallPrincipalSpec, CallSpec, ToolSpec, with_anonymous_id
from gateway.policy.decision import Outcome, Verdict
from gateway.policy.load import read_document

__all__ = ["Case", "Expectation", "LoadedSuite", "SuiteFile", "load_suite"]


class Expectation(_Strict):
    """What a case expects of the decision; only the keys given are checked."""

    # invalid_input: the gateway refuses the call before any policy (a value policies cannot see exactly)
    decision: Verdict | Literal["invalid_input"]
    message: str | None = None
    args: dict[str, Any] | None = None
    rules: dict[str, Outcome] = Field(default_factory=dict)
    result: Any = None
    approvers: list[str] | None = None


class Case(_Strict):
    """One test case."""

    name: str
    call: CallSpec
    expect: Expectation


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
    return LoadedSuite(path=path, name=name, spec=spec, policy_paths=policy_paths, case_lines=lines), problems


def _case_of(doc: YamlDocument):  # type: ignore[no-untyped-def]
    def case_of(loc: tuple[str | int, ...]) -> str | None:
        if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int) and isinstance(doc.data, dict):
            cases = doc.data.get("cases")
            if isinstance(cases, list) and loc[1] < len(cases) and isinstance(cases[loc[1]], dict):
                return f"case {cases[loc[1]].get('name', loc[1] + 1)!s}"
        return None
    return case_of
