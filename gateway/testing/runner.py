"""Run policy test suites: PASS / FAIL / ERROR per case with file:line, like `opa test`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from gateway.core.diagnostics import Diagnostic
from gateway.policy.call import ToolCall
from gateway.policy.decision import Decision
from gateway.policy.explain import INVALID_INPUT
from gateway.policy.load import check_policies, discover
from gateway.policy.policyset import PolicySet
from gateway.testing.suite import Case, LoadedSuite, load_suite

__all__ = ["CaseReport", "Status", "TestRun", "run_tests"]


class Status(StrEnum):
    """A case's result."""

    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"


@dataclass(slots=True)
class CaseReport:
    """One case's result, with what went wrong."""

    suite: str
    name: str
    file: str
    line: int
    status: Status
    problems: list[str] = field(default_factory=list)
    decision: Decision | None = None
    refused: str | None = None  # the gateway's message when it refuses the call at the door (invalid_input)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"suite": self.suite, "name": self.name, "file": self.file, "line": self.line,
                "status": str(self.status), "problems": self.problems,
                "decision": self.decision.to_dict() if self.decision else
                {"decision": INVALID_INPUT, "message": self.refused} if self.refused else None}


@dataclass(slots=True)
class TestRun:
    """Every case's report and the suite-level errors."""

    __test__ = False  # not a pytest class
    cases: list[CaseReport] = field(default_factory=list)
    errors: list[Diagnostic] = field(default_factory=list)

    def count(self, status: Status) -> int:
        """How many cases ended with ``status``."""
        return sum(1 for c in self.cases if c.status is status)

    @property
    def exit_code(self) -> int:
        """0 all passed, 1 anything failed or errored, 2 no case ran."""
        if self.errors or self.count(Status.FAIL) or self.count(Status.ERROR):
            return 1
        return 0 if self.cases else 2


# Called with each case's policy set, call and decision (`gateway test --coverage` watches with it).
Observer = Callable[[PolicySet, ToolCall, Decision], None]


def run_tests(paths: Sequence[str | Path], engine: str = "auto", run: str | None = None,
              observe: Observer | None = None) -> TestRun:
    """Discover suites under ``paths`` and run every case whose "suite/name" matches ``run``."""
    report = TestRun()
    suites, problems = discover(paths, tests=True)
    report.errors.extend(problems)
    selector = re.compile(run) if run else None
    cache: dict[tuple[str, ...], tuple[PolicySet | None, list[Diagnostic]]] = {}
    for path in suites:
        suite, problems = load_suite(path)
        report.errors.extend(d for d in problems if d.severity == "error")
        if suite is None:
            continue
        chosen = [(i, c) for i, c in enumerate(suite.spec.cases)
                  if selector is None or selector.search(f"{suite.name}/{c.name}")]
        if not chosen:
            continue
        key = tuple(sorted(str(p) for p in suite.policy_paths))
        if key not in cache:
            cache[key] = check_policies(suite.policy_paths, engine)
        policy_set, diagnostics = cache[key]
        if policy_set is None:
            errors = [d for d in diagnostics if d.severity == "error"]
            for i, case in chosen:
                report.cases.append(CaseReport(suite.name, case.name, str(path), suite.case_lines[i],
                                               Status.ERROR, [d.format() for d in errors]))
            continue
        for i, case in chosen:
            report.cases.append(_run_case(suite, case, suite.case_lines[i], policy_set, observe))
    return report


def _run_case(suite: LoadedSuite, case: Case, line: int, policy_set: PolicySet,
              observe: Observer | None = None) -> CaseReport:
    report = CaseReport(suite.name, case.name, str(suite.path), line, Status.PASS)
    try:
        call = case.call.to_call(suite.spec.principals, suite.spec.tools, suite.spec.env)
        report.refused = call.refused_at_door()
        decision = None if report.refused else policy_set.decide(call)
    except Exception as exc:  # a case must never stop the run; say what broke
        report.status = Status.ERROR
        report.problems.append(f"{type(exc).__name__}: {exc}")
        return report
    if decision is None:  # refused before any policy, as the gateway does: no rule was considered
        report.problems = _compare_refused(case, report.refused or "")
        if report.problems:
            report.status = Status.FAIL
        return report
    report.decision = decision
    if observe is not None:
        observe(policy_set, call, decision)
    report.problems = _compare(case, decision)
    if report.problems:
        report.status = Status.FAIL
    return report


def _compare_refused(case: Case, message: str) -> list[str]:
    """A case whose call the gateway refuses at the door passes only when it expects that."""
    expect = case.expect
    if expect.decision != INVALID_INPUT:
        return [f"decision: expected {expect.decision}, got {INVALID_INPUT} ({message})"]
    if expect.message is not None and message != expect.message:
        return [f"message: expected {expect.message!r}, got {message!r}"]
    return []


def _compare(case: Case, decision: Decision) -> list[str]:
    expect = case.expect
    problems = []
    if decision.verdict != expect.decision:
        why = f" (decided by {decision.decided_by}" + (f": {decision.message}" if decision.message else "") + ")" \
            if decision.decided_by else ""
        problems.append(f"decision: expected {expect.decision}, got {decision.verdict}{why}")
    if expect.message is not None and decision.message != expect.message:
        problems.append(f"message: expected {expect.message!r}, got {decision.message!r}")
    if expect.args is not None and decision.args != expect.args:
        problems.append(f"args: expected {expect.args!r}, got {decision.args!r}")
    outcomes = {r.rule: r for r in decision.rules}
    for rule, outcome in expect.rules.items():
        got = outcomes.get(rule)
        if got is None:
            problems.append(f"rule {rule}: expected {outcome}, but the rule did not match this tool")
        elif got.outcome is not outcome:
            detail = f" ({got.error})" if got.error else ""
            problems.append(f"rule {rule}: expected {outcome}, got {got.outcome}{detail}")
    if expect.result is not None and not _contains(decision.result, expect.result):
        problems.append(f"result: expected {expect.result!r}, got {decision.result!r}")
    if expect.approvers is not None:
        got_approvers = sorted(a for req in decision.approvals for a in req.approvers)
        if got_approvers != sorted(expect.approvers):
            problems.append(f"approvers: expected {sorted(expect.approvers)!r}, got {got_approvers!r}")
    return problems


def _contains(actual: Any, expected: Any) -> bool:
    """Maps compare as subsets (recursively); everything else exactly."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and _contains(actual[k], v) for k, v in expected.items()
        )
    return bool(actual == expected and type(actual) is type(expected)) or (
        isinstance(actual, (int, float)) and isinstance(expected, (int, float))
        and not isinstance(actual, bool) and not isinstance(expected, bool) and actual == expected
    )
