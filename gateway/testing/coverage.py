"""Which rules, and which top-level parts of their `when`, the test cases exercised.

A rule is exercised when some case made it fire (or, in audit mode, would-fire). A `when` with
top-level ``&&`` / ``||`` parts is split (see ``gateway.policy.clauses``) and each part is
exercised when some case that reached the rule saw it true and some case saw it false. Rules come
from every policy file under the paths tested (each compiled on its own) and from the sets the
suites load, so a file no suite loads shows up as not exercised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.policy.call import ToolCall
from gateway.policy.clauses import Clauses, clause_values, split_when
from gateway.policy.compile import CompiledRule
from gateway.policy.decision import Decision, Outcome
from gateway.policy.load import check_policies, discover
from gateway.policy.policyset import PolicySet

__all__ = ["ClauseCoverage", "CoverageCollector", "CoverageReport", "RuleCoverage", "coverage_exit"]

_FIRED = frozenset({Outcome.FIRED, Outcome.AUDIT})


@dataclass
class ClauseCoverage:
    """One top-level part of a `when`: was it ever true, ever false?"""

    source: str
    true: bool = False
    false: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"source": self.source, "true": self.true, "false": self.false}


@dataclass
class RuleCoverage:
    """One rule: how the cases left it."""

    rule: str
    at: str
    fired: int = 0
    not_fired: int = 0
    errors: int = 0
    operator: str | None = None
    clauses: list[ClauseCoverage] = field(default_factory=list)

    @property
    def exercised(self) -> bool:
        """Some case made it fire."""
        return self.fired > 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"rule": self.rule, "at": self.at, "exercised": self.exercised, "fired": self.fired,
                "not_fired": self.not_fired, "errors": self.errors, "clause_operator": self.operator,
                "clauses": [c.to_dict() for c in self.clauses]}


@dataclass
class CoverageReport:
    """Every rule's coverage, in file order."""

    rules: list[RuleCoverage]

    @property
    def percent(self) -> float:
        """Rules exercised, as a percentage (100 when there are none)."""
        if not self.rules:
            return 100.0
        return 100.0 * sum(r.exercised for r in self.rules) / len(self.rules)

    @property
    def branch_counts(self) -> tuple[int, int]:
        """(clause outcomes seen, clause outcomes possible): each part can be seen true and false."""
        seen = sum(c.true + c.false for r in self.rules for c in r.clauses)
        return seen, 2 * sum(len(r.clauses) for r in self.rules)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        seen, possible = self.branch_counts
        return {"percent": round(self.percent, 1), "exercised": sum(r.exercised for r in self.rules),
                "rules": [r.to_dict() for r in self.rules], "branches": {"seen": seen, "possible": possible}}

    def render(self) -> list[str]:
        """Person-readable lines: the totals, then what no case exercised."""
        seen, possible = self.branch_counts
        done = sum(r.exercised for r in self.rules)
        lines = [f"coverage: {done}/{len(self.rules)} rules exercised ({self.percent:.1f}%)"
                 + (f"; when branches: {seen}/{possible} clause outcomes ({100.0 * seen / possible:.1f}%)"
                    if possible else "")]
        for r in self.rules:
            if not r.exercised:
                why = "no case reached it" if not (r.not_fired or r.errors) else \
                    f"reached by {r.not_fired + r.errors} case(s), never fired"
                lines.append(f"  not exercised: {r.rule} at {r.at} ({why})")
        for r in self.rules:
            for c in r.clauses:
                missing = [word for word, seen_it in (("true", c.true), ("false", c.false)) if not seen_it]
                if missing and (r.fired or r.not_fired or r.errors):
                    lines.append(f"  branch: {r.rule} at {r.at}: {c.source!r} never {' or '.join(missing)}")
        return lines


class CoverageCollector:
    """Watches each case's decision (``observe``) and then reports what was exercised."""

    def __init__(self) -> None:
        self._rules: dict[tuple[str, str], RuleCoverage] = {}
        self._order: list[tuple[str, str]] = []
        self._clauses: dict[tuple[str, str], Clauses | None] = {}

    def _entry(self, rule: CompiledRule) -> tuple[tuple[str, str], RuleCoverage]:
        key = (str(Path(rule.file).resolve()), rule.id)
        entry = self._rules.get(key)
        if entry is None:
            entry = self._rules[key] = RuleCoverage(rule.id, f"{rule.file}:{rule.line}:{rule.column}")
            self._order.append(key)
        return key, entry

    def add_rules(self, policy_set: PolicySet) -> None:
        """Count the set's rules, exercised or not."""
        for rule in policy_set.rules:
            key, entry = self._entry(rule)
            if key not in self._clauses:
                variables = policy_set.policies[rule.policy_index].variables
                clauses = split_when(rule.when.source, policy_set.engine, variables) if rule.when else None
                self._clauses[key] = clauses
                if clauses is not None:
                    entry.operator = clauses.operator
                    entry.clauses = [ClauseCoverage(c.source) for c in clauses.parts]

    def observe(self, policy_set: PolicySet, call: ToolCall, decision: Decision) -> None:
        """Record one case's decision."""
        self.add_rules(policy_set)
        rules = {r.id: r for r in policy_set.rules}
        for result in decision.rules:
            rule = rules.get(result.rule)
            if rule is None:
                continue
            key, entry = self._entry(rule)
            if result.outcome in _FIRED:
                entry.fired += 1
            elif result.outcome is Outcome.ERROR:
                entry.errors += 1
            else:
                entry.not_fired += 1
            clauses = self._clauses.get(key)
            if clauses is None:
                continue
            for value, seen in zip(clause_values(policy_set, call, decision, rule, clauses), entry.clauses,
                                   strict=True):
                if value is True:
                    seen.true = True
                elif value is False:
                    seen.false = True

    def report(self, paths: Sequence[str | Path], engine: str) -> CoverageReport:
        """The coverage of every rule seen, and of every rule in the policy files under ``paths``."""
        files, _ = discover(paths)
        for file in files:
            policy_set, _ = check_policies([file], engine)
            if policy_set is not None:
                self.add_rules(policy_set)
        return CoverageReport([self._rules[k] for k in self._order])


def coverage_exit(code: int, coverage: CoverageReport | None, fail_under: float | None) -> int:
    """The test run's exit code, or 1 when it passed but rule coverage is under ``fail_under``."""
    if code == 0 and coverage is not None and fail_under is not None and coverage.percent < fail_under:
        return 1
    return code
