"""The policy test-suite runner: PASS / FAIL / ERROR per case with file:line, --run, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.policy import Verdict
from gateway.testing import Status, TestRun, run_tests

POLICY = """
    policy: pay
    default: reject
    rules:
      - id: allow-payments
        tools: ["payments_*"]
        action: allow
      - id: big
        tools: [payments_transfer]
        when: args.amount > 1000
        action: approve
        message: Big transfer.
        approval: {approvers: ["group:finance"]}
      - id: cap
        tools: [search]
        action: rewrite
        rewrite: {set: {limit: '10'}}
      - id: dry-run
        tools: [files_delete]
        action: skip
        result: {deleted: false, note: skipped}
"""

SUITE = """
    suite: pay
    principals:
      alice: {id: alice, groups: [finance]}
    tools:
      transfer: {name: payments_transfer}
    cases:
      - name: small transfer
        call: {tool: transfer, args: {amount: 5}, principal: alice}
        expect: {decision: allow, rules: {pay/allow-payments: fired, pay/big: not_fired}}
      - name: big transfer
        call: {tool: payments_transfer, args: {amount: 5000}}
        expect: {decision: approve, message: Big transfer., approvers: ["group:finance"]}
      - name: search is capped
        call: {tool: search, args: {limit: 99}}
        expect: {decision: reject, args: {limit: 10}}
      - name: delete is skipped
        call: {tool: files_delete, args: {path: /x}}
        expect: {decision: skip, result: {deleted: false}}
      - name: wrong decision
        call: {tool: payments_transfer, args: {amount: 5}}
        expect: {decision: reject}
      - name: wrong everything else
        call: {tool: payments_transfer, args: {amount: 5000}}
        expect:
          decision: approve
          message: other
          args: {amount: 1}
          rules: {pay/big: not_fired, pay/cap: fired}
          approvers: [bob]
      - name: unknown principal
        call: {tool: transfer, principal: mallory}
        expect: {decision: allow}
"""


@pytest.fixture
def suite_dir(write) -> Path:
    write("suite/pay.yaml", POLICY)
    return write("suite/pay_test.yaml", SUITE).parent


def statuses(run: TestRun) -> list[tuple[str, Status]]:
    return [(f"{c.suite}/{c.name}", c.status) for c in run.cases]


def test_each_case_passes_fails_or_errors(suite_dir, engine):
    run = run_tests([suite_dir], engine)
    assert statuses(run) == [
        ("pay/small transfer", Status.PASS),
        ("pay/big transfer", Status.PASS),
        ("pay/search is capped", Status.PASS),
        ("pay/delete is skipped", Status.PASS),
        ("pay/wrong decision", Status.FAIL),
        ("pay/wrong everything else", Status.FAIL),
        ("pay/unknown principal", Status.ERROR),
    ]
    assert (run.count(Status.PASS), run.count(Status.FAIL), run.count(Status.ERROR)) == (4, 2, 1)
    assert run.errors == []
    assert run.exit_code == 1


def test_cases_name_their_file_and_line(suite_dir, engine):
    run = run_tests([suite_dir], engine)
    suite_file = str(suite_dir / "pay_test.yaml")
    assert {c.file for c in run.cases} == {suite_file}
    lines = (suite_dir / "pay_test.yaml").read_text().splitlines()
    expected = [i + 1 for i, text in enumerate(lines) if text.startswith("  - name: ")]
    assert [c.line for c in run.cases] == expected == [7, 10, 13, 16, 19, 22, 30]


def test_failures_say_what_differed(suite_dir, engine):
    cases = {c.name: c for c in run_tests([suite_dir], engine).cases}
    assert cases["wrong decision"].problems == [
        "decision: expected reject, got allow (decided by pay/allow-payments)"
    ]
    assert cases["wrong everything else"].problems == [
        "message: expected 'other', got 'Big transfer.'",
        "args: expected {'amount': 1}, got {'amount': 5000}",
        "rule pay/big: expected not_fired, got fired",
        "rule pay/cap: expected fired, but the rule did not match this tool",
        "approvers: expected ['bob'], got ['group:finance']",
    ]
    assert cases["wrong everything else"].decision is not None
    assert cases["wrong everything else"].decision.verdict is Verdict.APPROVE
    unknown = cases["unknown principal"]
    assert unknown.decision is None
    assert unknown.problems == ["KeyError: \"unknown principal 'mallory'; declare it under 'principals'\""]


def test_run_selects_cases_by_suite_and_name(suite_dir, engine):
    run = run_tests([suite_dir], engine, run=r"^pay/(small|big) transfer$")
    assert statuses(run) == [("pay/small transfer", Status.PASS), ("pay/big transfer", Status.PASS)]
    assert run.exit_code == 0
    assert statuses(run_tests([suite_dir], engine, run="wrong d")) == [("pay/wrong decision", Status.FAIL)]


def test_nothing_ran_is_exit_code_2(suite_dir, engine, tmp_path):
    run = run_tests([suite_dir], engine, run="no such case")
    assert (run.cases, run.errors, run.exit_code) == ([], [], 2)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_tests([empty], engine).exit_code == 2


def test_policies_that_fail_to_load_make_every_case_an_error(write, engine):
    write("broken/p.yaml", "policy: p\nrules:\n  - {id: r, when: argz, action: allow}\n")
    path = write("broken/p_test.yaml", """
        cases:
          - name: one
            call: {tool: t}
            expect: {decision: allow}
          - name: two
            call: {tool: t}
            expect: {decision: reject}
    """)
    run = run_tests([path], engine)
    assert statuses(run) == [("p/one", Status.ERROR), ("p/two", Status.ERROR)]  # suite named after its file
    for case in run.cases:
        (problem,) = case.problems
        assert problem.startswith(f"{path.parent / 'p.yaml'}:3:19: error[cel-undeclared]: ")
    assert run.exit_code == 1


def test_policies_key_points_at_files_relative_to_the_suite(write, engine):
    write("pols/allow.yaml", "policy: a\nrules: [{id: r, action: allow}]\n")
    write("pols/reject.yaml", "policy: b\nrules: [{id: r, action: reject}]\n")
    path = write("suites/s_test.yaml", """
        suite: only-allow
        policies: [../pols/allow.yaml]
        cases:
          - name: allowed
            call: {tool: t}
            expect: {decision: allow, rules: {a/r: fired}}
    """)
    run = run_tests([path], engine)
    assert statuses(run) == [("only-allow/allowed", Status.PASS)]


def test_a_malformed_suite_is_a_run_error(write, engine):
    write("s/p.yaml", "policy: p\nrules: [{id: r, action: allow}]\n")
    path = write("s/bad_test.yaml", """
        cases:
          - name: typo
            call: {tool: t}
            expct: {decision: allow}
    """)
    run = run_tests([path.parent], engine)
    assert run.cases == []
    codes = [(d.code, d.file, d.line, d.column, d.rule) for d in run.errors]
    assert codes == [
        ("missing-key", str(path), 2, 5, "case typo"),
        ("unknown-key", str(path), 4, 5, "case typo"),
    ]
    assert run.exit_code == 1


def test_a_response_stage_case(write, engine):
    write("r/p.yaml", r"""
        policy: p
        rules:
          - id: scrub
            stage: response
            action: rewrite
            rewrite: {redact: ['sk-\w+']}
    """)
    path = write("r/p_test.yaml", """
        cases:
          - name: key is redacted
            call: {tool: t, stage: response, result: {text: "key sk-123"}}
            expect: {decision: allow, result: {text: "key [REDACTED]"}}
          - name: subset must match
            call: {tool: t, stage: response, result: {text: "key sk-123"}}
            expect: {decision: allow, result: {text: "key sk-123"}}
    """)
    run = run_tests([path], engine)
    assert statuses(run) == [("p/key is redacted", Status.PASS), ("p/subset must match", Status.FAIL)]
