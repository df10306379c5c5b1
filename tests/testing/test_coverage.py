"""`gateway test --coverage`: the rules and top-level `when` parts no case exercised, and --fail-under."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.testing import run_tests
from gateway.testing.coverage import CoverageCollector

POLICY = """
    policy: pay
    rules:
      - id: big
        tools: [payments_transfer]
        when: args.amount > 1000 && args.currency == "EUR"
        action: approve
        approval: {approvers: [bob]}
      - id: blocked
        tools: [payments_transfer]
        when: args.to == "mallory" || "blocked" in principal.groups
        action: reject
      - id: never-tested
        tools: [payments_refund]
        action: reject
      - id: shadow
        tools: [payments_transfer]
        when: args.amount > 10
        action: reject
        mode: audit
"""

# A file no suite loads: its rules count, and none is exercised.
ORPHAN = """
    policy: orphan
    rules:
      - id: lonely
        action: reject
"""

SUITE = """
    suite: pay
    policies: [pay.yaml]
    cases:
      - name: big EUR transfer
        call: {tool: payments_transfer, args: {amount: 5000, currency: EUR, to: bob}}
        expect: {decision: approve}
      - name: small USD transfer
        call: {tool: payments_transfer, args: {amount: 5, currency: USD, to: bob}}
        expect: {decision: allow}
      - name: to mallory
        call: {tool: payments_transfer, args: {amount: 5, currency: USD, to: mallory}}
        expect: {decision: reject}
"""


@pytest.fixture
def project(write) -> Path:  # type: ignore[no-untyped-def]
    write("policies/pay.yaml", POLICY)
    write("policies/pay_test.yaml", SUITE)
    return Path(write("policies/orphan/orphan.yaml", ORPHAN)).parent.parent


def test_rules_and_branches_no_case_exercised(project: Path, engine: str) -> None:
    collector = CoverageCollector()
    run = run_tests([project], engine, observe=collector.observe)
    assert run.exit_code == 0
    report = collector.report([project], engine)
    rules = {r.rule: r for r in report.rules}
    assert set(rules) == {"pay/big", "pay/blocked", "pay/never-tested", "pay/shadow", "orphan/lonely"}
    assert sorted(r for r, c in rules.items() if not c.exercised) == ["orphan/lonely", "pay/never-tested"]
    assert rules["pay/shadow"].exercised  # an audit-mode rule counts when it would have fired
    assert report.percent == pytest.approx(60.0)

    big = rules["pay/big"]
    assert big.operator == "&&"
    assert [(c.source, c.true, c.false) for c in big.clauses] == [
        ("args.amount > 1000", True, True), ('args.currency == "EUR"', True, True)]
    blocked = rules["pay/blocked"]
    assert blocked.operator == "||"
    assert [(c.source, c.true, c.false) for c in blocked.clauses] == [
        ('args.to == "mallory"', True, True), ('"blocked" in principal.groups', False, True)]
    assert report.branch_counts == (7, 8)


def test_the_command(project: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test", str(project), "--engine", engine, "--coverage"])
    out = capsys.readouterr().out
    assert code == 0
    assert "3 passed, 0 failed\ncoverage: 3/5 rules exercised (60.0%); when branches: 7/8 clause outcomes (87.5%)" \
        in out
    assert "  not exercised: pay/never-tested at " in out and "(no case reached it)" in out
    assert "  not exercised: orphan/lonely at " in out
    assert "  branch: pay/blocked at " in out and "'\"blocked\" in principal.groups' never true" in out

    assert main(["test", str(project), "--engine", engine, "--coverage", "--fail-under", "60"]) == 0
    capsys.readouterr()
    assert main(["test", str(project), "--engine", engine, "--coverage", "--fail-under", "61"]) == 1
    assert "coverage 60.0% is under --fail-under 61.0" in capsys.readouterr().out

    assert main(["test", str(project), "--engine", engine, "--coverage", "--format", "json",
                 "--fail-under", "90"]) == 1
    coverage = json.loads(capsys.readouterr().out)["coverage"]
    assert (coverage["percent"], coverage["exercised"], coverage["branches"]) == (60.0, 3, {"seen": 7, "possible": 8})


def test_fail_under_does_not_hide_failures(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "pay_test.yaml").write_text((project / "pay_test.yaml").read_text().replace(
        "expect: {decision: allow}", "expect: {decision: reject}"))
    assert main(["test", str(project), "--coverage", "--fail-under", "0"]) == 1
    capsys.readouterr()


def test_fail_under_needs_a_percentage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["test", ".", "--coverage", "--fail-under", "150"])
    assert exc.value.code == 2
    assert "a percentage from 0 to 100" in capsys.readouterr().err


def test_the_quick_start(capsys: pytest.CaptureFixture[str]) -> None:
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "policies"
    assert main(["test", str(quickstart), "--coverage"]) == 0
    out = capsys.readouterr().out
    assert "coverage: 7/8 rules exercised (87.5%)" in out
    # the weekend rule is in audit mode and no case runs on a weekend
    assert "  not exercised: payments/audit-weekend-transfers at " in out


def test_rules_fired_in_steps_count(write, engine: str) -> None:  # type: ignore[no-untyped-def]
    write("seq/s.yaml", """
        policy: s
        rules:
          - id: after-one-call
            when: session.calls >= 1 && tool.name == "b"
            action: reject
          - id: response-only
            stage: response
            when: result.text == "boom"
            action: reject
    """)
    path = write("seq/s_test.yaml", """
        cases:
          - name: the second step fires the rule
            steps:
              - call: {tool: a}
                result: {text: fine}
              - call: {tool: b}
                expect: {decision: reject}
    """)
    collector = CoverageCollector()
    assert run_tests([path], engine, observe=collector.observe).exit_code == 0
    rules = {r.rule: r for r in collector.report([path.parent], engine).rules}
    assert (rules["s/after-one-call"].fired, rules["s/after-one-call"].not_fired) == (1, 1)
    assert (rules["s/response-only"].fired, rules["s/response-only"].not_fired) == (0, 1)
    assert [(c.true, c.false) for c in rules["s/after-one-call"].clauses] == [(True, True), (True, True)]
