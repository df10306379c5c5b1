"""What a case expected against what happened: one line per difference (an empty list: it passed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.testing.run_state import RunState
from gateway.testing.sequence import StepOutcome
from gateway.testing.suite import Expectation, RunExpectation

__all__ = ["compare_run", "compare_step", "contains"]


def compare_step(expect: Expectation, outcome: StepOutcome) -> list[str]:
    """The differences between one call's expectation and what became of it."""
    decisions = outcome.decisions
    if not decisions:  # refused before any policy: only the decision and its message can be compared
        if expect.decision != outcome.verdict:
            return [f"decision: expected {expect.decision}, got {outcome.verdict} ({outcome.message})"]
        if expect.message is not None and outcome.message != expect.message:
            return [f"message: expected {expect.message!r}, got {outcome.message!r}"]
        return []
    problems = []
    deciding = outcome.response if outcome.response is not None and outcome.response.verdict == outcome.verdict \
        and outcome.verdict != "allow" else decisions[0]
    if outcome.verdict != expect.decision:
        problems.append(f"decision: expected {expect.decision}, got {outcome.verdict}{_why(outcome, deciding)}")
    if expect.message is not None and outcome.message != expect.message:
        problems.append(f"message: expected {expect.message!r}, got {outcome.message!r}")
    args = decisions[0].args
    if expect.args is not None and args != expect.args:
        problems.append(f"args: expected {expect.args!r}, got {args!r}")
    outcomes = {r.rule: r for d in decisions for r in d.rules}
    for rule, wanted in expect.rules.items():
        got = outcomes.get(rule)
        if got is None:
            problems.append(f"rule {rule}: expected {wanted}, but the rule did not match this tool")
        elif got.outcome is not wanted:
            detail = f" ({got.error})" if got.error else ""
            problems.append(f"rule {rule}: expected {wanted}, got {got.outcome}{detail}")
    result = decisions[-1].result
    if expect.result is not None and not contains(result, expect.result):
        problems.append(f"result: expected {expect.result!r}, got {result!r}")
    if expect.approvers is not None:
        got_approvers = sorted(a for req in decisions[0].approvals for a in req.approvers)
        if got_approvers != sorted(expect.approvers):
            problems.append(f"approvers: expected {sorted(expect.approvers)!r}, got {got_approvers!r}")
    if expect.labels is not None and outcome.labels != expect.labels:
        problems.append(f"labels: expected the call to add {expect.labels!r}, it added {outcome.labels!r}")
    if expect.tallies is not None:
        problems.extend(_tallies(expect.tallies, outcome.tallies, "after the call"))
    return problems


def compare_run(expect: RunExpectation, state: RunState, tallies: Mapping[str, float | int],
                seen: Mapping[str, list[str]]) -> list[str]:
    """The differences between ``expect_run`` and the run the last step left (``tallies``/``seen``: every
    declared tally's, zeros filled)."""
    problems = []
    if expect.labels is not None and state.labels != expect.labels:
        problems.append(f"run labels: expected {expect.labels!r}, got {state.labels!r}")
    if expect.tallies is not None:
        problems.extend(_tallies(expect.tallies, tallies, "at the end of the run"))
    for tally, values in (expect.seen or {}).items():
        if tally not in seen:
            problems.append(f"seen {tally}: no distinct tally has this id{_declared(seen)}")
        elif list(seen[tally]) != values:
            problems.append(f"seen {tally}: expected {values!r}, got {list(seen[tally])!r}")
    tools = [str(e.get("tool")) for e in state.history]
    if expect.history_tools is not None and tools != expect.history_tools:
        problems.append(f"history: expected the tools {expect.history_tools!r}, got {tools!r}")
    return problems


def _tallies(expected: Mapping[str, float | int], got: Mapping[str, float | int], when: str) -> list[str]:
    problems = []
    for tally, value in expected.items():
        if tally not in got:
            problems.append(f"tally {tally}: no tally has this id{_declared(got)}")
        elif got[tally] != value:
            problems.append(f"tally {tally}: expected {value!r} {when}, got {got[tally]!r}")
    return problems


def _declared(tallies: Mapping[str, Any]) -> str:
    return f" (declared: {', '.join(sorted(tallies))})" if tallies else " (the policies declare none)"


def _why(outcome: StepOutcome, deciding: Any) -> str:
    if str(deciding.verdict) != outcome.verdict:  # refused after the policies decided (a tally, the labels)
        return f" ({outcome.message})"
    if not deciding.decided_by:
        return ""
    return f" (decided by {deciding.decided_by}" + (f": {outcome.message}" if outcome.message else "") + ")"


def contains(actual: Any, expected: Any) -> bool:
    """Maps compare as subsets (recursively); everything else exactly."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in expected.items()
        )
    return bool(actual == expected and type(actual) is type(expected)) or (
        isinstance(actual, (int, float)) and isinstance(expected, (int, float))
        and not isinstance(actual, bool) and not isinstance(expected, bool) and actual == expected
    )
