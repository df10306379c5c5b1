"""Run policy test suites: PASS / FAIL / ERROR per case with file:line, like `opa test`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from gateway.core.diagnostics import Diagnostic
from gateway.policy.decision import Decision
from gateway.policy.explain import INVALID_INPUT
from gateway.policy.load import check_policies, discover
from gateway.policy.policyset import PolicySet
from gateway.testing.compare import compare_run, compare_step
from gateway.testing.sequence import Fixtures, Observer, StepOutcome, run_steps
from gateway.testing.suite import LoadedSuite, load_suite

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
    decision: Decision | None = None  # the (last) call's
    refused: str | None = None  # the gateway's message when it refuses the (last) call before any policy
    steps: list[StepOutcome] = field(default_factory=list)  # a sequence's, in order
    failed_step: int | None = None  # the first step (from 1) whose expectation failed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        out = {"suite": self.suite, "name": self.name, "file": self.file, "line": self.line,
               "status": str(self.status), "problems": self.problems,
               "decision": self.decision.to_dict() if self.decision else
               {"decision": INVALID_INPUT, "message": self.refused} if self.refused else None}
        if self.steps:
            out["failed_step"] = self.failed_step
            out["steps"] = [{"decision": s.verdict, "message": s.message, "labels": s.labels, "tallies": s.tallies}
                            for s in self.steps]
        return out


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
        for i, _ in chosen:
            report.cases.append(_run_case(suite, i, policy_set, observe))
    return report


def _run_case(suite: LoadedSuite, index: int, policy_set: PolicySet, observe: Observer | None = None) -> CaseReport:
    case = suite.spec.cases[index]
    report = CaseReport(suite.name, case.name, str(suite.path), suite.case_lines[index], Status.PASS)
    fixtures = Fixtures(suite.spec.principals, suite.spec.tools, suite.spec.env)
    try:
        outcomes, state = run_steps(policy_set, case, fixtures, observe)
    except Exception as exc:  # a case must never stop the run; say what broke
        report.status = Status.ERROR
        report.problems.append(f"{type(exc).__name__}: {exc}")
        return report
    last = outcomes[-1]
    report.decision = last.response or last.request
    report.refused = last.message if not last.decisions else None
    report.steps = outcomes if case.steps is not None else []
    for n, (step, outcome) in enumerate(zip(case.as_steps(), outcomes, strict=True), 1):
        problems = compare_step(step.expect, outcome) if step.expect is not None else []
        if case.steps is None:
            report.problems.extend(problems)
            continue
        where = f"step {n} ({step.call.tool if isinstance(step.call.tool, str) else step.call.tool.name}) " \
                f"at {suite.path}:{suite.step_lines[index][n - 1]}"
        report.problems.extend(f"{where}: {p}" for p in problems)
        if problems and report.failed_step is None:
            report.failed_step = n
    if case.expect_run is not None:
        tallies = state.tallies.with_zeros(policy_set.zero)
        report.problems.extend(f"run: {p}" for p in compare_run(case.expect_run, state, tallies.values, tallies.seen))
    if report.problems:
        report.status = Status.FAIL
    return report
