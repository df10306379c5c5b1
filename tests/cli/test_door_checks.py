"""`gateway explain` and `gateway test` run the gateway's door check before any policy (issue 18, item 12):
the values the live gateway refuses `invalid_input` (U+0000, an integer outside int64, a lone surrogate,
nesting past the limit) are reported `invalid_input` with the gateway's own message, never "allow".
In-process: the commands' code with real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.core.limits import MAX_VALUE_NESTING
from gateway.core.values import door_problem

# Allows everything: without the door check each hostile call below is answered "allow".
POLICY = """
policy: open
default: allow
rules:
  - id: no-x
    tools: [search]
    when: string(args.q).contains("x")
    action: reject
"""

# Each case's `args` as JSON text, written as-is into a call file (JSON) or a suite (YAML flow style reads
# the same escapes): a value the gateway refuses at the door, and the start of why.
HOSTILE = {
    "nul": ('{"q": "a\\u0000x"}', "/arguments/q holds U+0000 (NUL)"),
    "int64-overflow": ('{"q": 9223372036854775808}', "/arguments/q is an integer outside -2^63..2^63-1"),
    "lone-surrogate": ('{"q": "\\ud800"}', "/arguments/q holds a lone surrogate"),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "open.yaml").write_text(POLICY, encoding="utf-8")
    return tmp_path / "policies"


@pytest.mark.parametrize("name", list(HOSTILE))
def test_explain_reports_invalid_input_for_a_value_the_gateway_refuses(name, policies, tmp_path, capsys):
    args, why = HOSTILE[name]
    call = tmp_path / "call.json"
    call.write_text(f'{{"tool": "search", "args": {args}}}', encoding="utf-8")
    code, out = _run(["explain", "--format", "json", "--policies", str(policies), "--call", str(call)], capsys)
    assert code == 0, out
    report = json.loads(out)
    assert report["decision"] == "invalid_input"
    assert report["message"].startswith(f"The call was refused: {why}")
    assert report["trace"] == []  # no rule was considered, as in the gateway

    code, out = _run(["explain", "--policies", str(policies), "--call", str(call)], capsys)
    assert out.startswith("decision: invalid_input  (tool search, stage request)\n"), out


def _suite(tmp_path: Path, policies: Path, args: str, decision: str) -> Path:
    suite = tmp_path / "open_test.yaml"
    suite.write_text(f"suite: door\npolicies: [{policies / 'open.yaml'}]\ncases:\n"
                     f"  - name: hostile\n    call: {{tool: search, args: {args}}}\n"
                     f"    expect: {{decision: {decision}}}\n", encoding="utf-8")
    return suite


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_test_case_expecting_allow_fails_with_invalid_input(name, policies, tmp_path, capsys):
    args, why = HOSTILE[name]
    suite = _suite(tmp_path, policies, args, "allow")
    code, out = _run(["test", str(suite)], capsys)
    assert code == 1, out
    assert "FAIL" in out and f"decision: expected allow, got invalid_input (The call was refused: {why}" in out

    code, out = _run(["test", "--format", "json", str(suite)], capsys)
    case = json.loads(out)["cases"][0]
    assert (case["status"], case["decision"]["decision"]) == ("FAIL", "invalid_input")


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_test_case_can_expect_invalid_input(name, policies, tmp_path, capsys):
    suite = _suite(tmp_path, policies, HOSTILE[name][0], "invalid_input")
    code, out = _run(["test", str(suite)], capsys)
    assert (code, out.splitlines()[-1]) == (0, "1 passed, 0 failed"), out


def test_expecting_invalid_input_of_an_admitted_call_fails(policies, tmp_path, capsys):
    suite = _suite(tmp_path, policies, '{"q": "fine"}', "invalid_input")
    code, out = _run(["test", str(suite)], capsys)
    assert code == 1 and "decision: expected invalid_input, got allow" in out, out


def test_nesting_past_the_limit_is_refused_before_any_decision(policies, tmp_path, capsys):
    # The call file's reader caps nesting at the same limit, counted from the file's top, so the
    # deepest arguments a file can hold are refused there; the door check says the same of a value
    # built in code.
    deep: object = "x"
    for _ in range(MAX_VALUE_NESTING):
        deep = [deep]
    assert door_problem("call-1", "test-session", {"q": deep}) is not None
    call = tmp_path / "deep.json"
    call.write_text(json.dumps({"tool": "search", "args": {"q": deep}}), encoding="utf-8")
    code, out = _run(["explain", "--policies", str(policies), "--call", str(call)], capsys)
    assert code == 1 and "nested more than" in out and "decision: allow" not in out
