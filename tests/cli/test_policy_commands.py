"""`gateway check | test | explain | schema`, run in this process through `gateway.cli.main`; one test per
command runs the real command in a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from cli_run import run_cli, run_subprocess

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
"""

SUITE = """
    suite: pay
    cases:
      - name: small
        call: {tool: payments_transfer, args: {amount: 5}}
        expect: {decision: allow}
      - name: big
        call: {tool: payments_transfer, args: {amount: 5000}}
        expect: {decision: approve}
      - name: wrong
        call: {tool: payments_transfer, args: {amount: 5}}
        expect: {decision: reject}
"""

BROKEN = """
    policy: broken
    rules:
      - id: typo
        action: allow
        whn: 'true'
      - id: bad-cel
        when: args.x == )
        action: allow
"""


def gateway(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `gateway ARGS` in ``cwd``, in this process (``run_subprocess`` for the real console entry)."""
    return run_cli(cwd, *args)


@pytest.fixture
def project(write, tmp_path) -> Path:
    write("good/pay.yaml", POLICY)
    write("good/pay_test.yaml", SUITE)
    write("bad/broken.yaml", BROKEN)
    write("calls/big.json", json.dumps({"tool": "payments_transfer", "args": {"amount": 5000}}))
    return tmp_path


# --- check ---------------------------------------------------------------------------------------


def test_check_ok(project):
    out = run_subprocess(project, "check", "good")
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"ok: 1 policies, 2 rules, revision [0-9a-f]{16} \(cel-expr-python\)\n", out.stdout)
    assert out.stderr == ""


@pytest.mark.both_engines
def test_check_uses_the_engine_it_is_given(project, engine):
    out = gateway(project, "check", "--engine", engine, "good")
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith(f" ({engine})\n")


def test_check_prints_one_positioned_line_per_error_with_a_caret_under_it(project):
    out = gateway(project, "check", "bad")
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert lines[-1] == "2 error(s)"
    heads = [line for line in lines[:-1] if not line.startswith("  ")]
    assert [re.match(r"^(\S+):(\d+):(\d+): error\[([a-z-]+)\]: ", line).groups() for line in heads] == [
        ("bad/broken.yaml", "5", "5", "unknown-key"),
        ("bad/broken.yaml", "7", "21", "cel-compile"),
    ]
    assert heads[0].endswith("(rule broken/typo); hint: did you mean 'when'?")
    # each diagnostic is followed by its line and a caret under the column, as compilers print them
    assert lines[1:3] == ["  5 |     whn: 'true'",
                          "    |     ^"]
    assert lines[4:6] == ["  7 |     when: args.x == )",
                          "    |                     ^"]
    assert out.stdout == ""


def test_check_prints_warnings_on_stdout_and_still_succeeds(project, write):
    write("warn/empty.yaml", "policy: e\nrules: []\n")
    write("warn/pay.yaml", POLICY)
    out = gateway(project, "check", "warn")
    assert out.returncode == 0
    first, line, caret, last = out.stdout.splitlines()
    assert first == ("warn/empty.yaml:1:1: warning[empty-policy]: policy 'e' has no rules; "
                     "hint: add rules, or delete the file")
    assert (line, caret) == ("  1 | policy: e", "    | ^")
    assert last.startswith("ok: 2 policies, 2 rules, revision ")


def test_check_json(project):
    out = gateway(project, "check", "--format", "json", "bad")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["ok"] is False
    found = [(d["file"], d["line"], d["column"], d["code"], d["rule"], d["severity"]) for d in report["diagnostics"]]
    assert found == [
        ("bad/broken.yaml", 5, 5, "unknown-key", "broken/typo", "error"),
        ("bad/broken.yaml", 7, 21, "cel-compile", "broken/bad-cel", "error"),
    ]
    assert set(report["diagnostics"][0]) == {"code", "message", "file", "line", "column", "rule", "hint", "severity",
                                             "snippet"}
    assert [d["snippet"] for d in report["diagnostics"]] == ["    whn: 'true'", "    when: args.x == )"]

    out = gateway(project, "check", "--format", "json", "good")
    assert out.returncode == 0
    report = json.loads(out.stdout)
    assert {k: report[k] for k in ("ok", "engine", "default", "files", "policies", "rules", "diagnostics")} == {
        "ok": True, "engine": "cel-expr-python", "default": "reject", "files": ["good/pay.yaml"], "policies": 1,
        "rules": 2, "diagnostics": [],
    }


def test_check_without_policies_fails(tmp_path):
    out = gateway(tmp_path, "check")
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        ".:1:1: error[no-policies]: no policy files found in .; "
        "hint: policy files are *.yaml files that do not end in _test.yaml",
        "1 error(s)",
    ]


# --- check against the tool catalog (--tools snapshot, --config live) ------------------------------

GITHUB = """
    policy: gh
    rules:
      - id: read
        tools: [github_lsit_*]
        action: allow
      - id: list
        tools: ["github_list_[*"]
        action: allow
      - id: protect-main
        tools: [github_create_branch]
        when: args.brnach == "main"
        action: reject
"""

SNAPSHOT = {"version": 1, "tools": [
    {"name": "github_list_issues", "input_schema": {"type": "object", "properties": {"repo": {"type": "string"}}}},
    {"name": "github_list_pulls", "input_schema": {"type": "object", "properties": {"repo": {"type": "string"}}}},
    {"name": "github_create_branch", "input_schema": {"type": "object", "additionalProperties": False,
                                                      "properties": {"repo": {}, "branch": {}}}},
]}
UPSTREAM_SERVER = Path(__file__).parents[1] / "upstream_mcp_server.py"


@pytest.fixture
def github(write, tmp_path) -> Path:
    write("policies/gh.yaml", GITHUB)
    write("tools.json", json.dumps(SNAPSHOT))
    return tmp_path


def test_check_without_a_catalog_passes_the_mistakes_it_cannot_see(github):
    out = gateway(github, "check", "policies")
    assert out.returncode == 0, out.stderr


def test_check_against_a_snapshot_reports_each_mistake_at_its_spot_with_a_caret(github):
    out = gateway(github, "check", "policies", "--tools", "tools.json")
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "policies/gh.yaml:4:13: error[unknown-tool]: no tool matches 'github_lsit_*'; the rule never applies"
        " (rule gh/read); hint: did you mean 'github_list_*'?",
        "  4 |     tools: [github_lsit_*]",
        "    |             ^",
        "policies/gh.yaml:7:13: error[unknown-tool]: no tool matches 'github_list_[*' (its '[' is never closed,"
        " so it is a literal '[', which no tool name has); the rule never applies (rule gh/list);"
        " hint: did you mean 'github_list_*'?",
        "  7 |     tools: [\"github_list_[*\"]",
        "    |             ^",
        # the typed environment reports it (once: the catalog check steps aside on that line)
        "policies/gh.yaml:11:15: error[cel-field]: undefined field 'brnach' of args of github_create_branch"
        " (did you mean 'branch'?) in 'args.brnach == \"main\"' (rule gh/protect-main); hint: the fields of args of"
        " github_create_branch are: branch, repo",
        "  11 |     when: args.brnach == \"main\"",
        "     |               ^",
        "3 error(s)",
    ]


def test_check_against_a_snapshot_as_json(github):
    out = gateway(github, "check", "policies", "--tools", "tools.json", "--format", "json")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["ok"] is False and report["tools"] == 3
    assert [(d["code"], d["line"], d["column"], d["rule"], d["severity"], d["snippet"])
            for d in report["diagnostics"]] == [
        ("unknown-tool", 4, 13, "gh/read", "error", "    tools: [github_lsit_*]"),
        ("unknown-tool", 7, 13, "gh/list", "error", '    tools: ["github_list_[*"]'),
        ("cel-field", 11, 15, "gh/protect-main", "error", '    when: args.brnach == "main"'),
    ]


def test_warnings_pass_unless_strict(write, tmp_path):
    write("policies/p.yaml", "policy: p\nrules:\n  - id: r\n    tools: [github_list_*]\n"
                             "    when: args.repo == 'x'\n    action: reject\n")
    write("tools.json", json.dumps(SNAPSHOT))
    out = gateway(tmp_path, "check", "policies", "--tools", "tools.json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("policies/p.yaml:5:15: warning[cel-optional-field]: 'args.repo' may be absent")
    assert lines[-1].startswith("ok: 1 policies, 1 rules, revision ")
    assert lines[-1].endswith(", checked against 3 tools")
    out = gateway(tmp_path, "check", "policies", "--tools", "tools.json", "--strict")
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == "1 error(s) (--strict: warnings count)"


def test_a_rule_that_can_never_fire_is_reported_without_a_catalog(write, tmp_path):
    write("policies/p.yaml", "policy: p\nrules:\n  - id: r\n    when: 1 > 2\n    action: reject\n")
    out = gateway(tmp_path, "check", "policies")
    assert out.returncode == 0
    assert out.stdout.splitlines()[:3] == [
        "policies/p.yaml:4:11: warning[rule-never-fires]: 'when' is always false ('1 > 2' reads nothing)"
        " (rule p/r); hint: remove the rule, or write the condition it was meant to test",
        "  4 |     when: 1 > 2",
        "    |           ^"]


@pytest.mark.parametrize("text", ["{not json", '{"tools": []}', '{"version": 1, "tools": [{"nme": "x"}]}'])
def test_a_bad_snapshot_is_an_error(github, text):
    (github / "tools.json").write_text(text)
    out = gateway(github, "check", "policies", "--tools", "tools.json")
    assert out.returncode == 1
    assert out.stderr.startswith("tools.json:1:1: error[invalid-catalog]: not a tool catalog: ")


def test_check_config_checks_against_the_live_upstreams(write, tmp_path):
    write("policies/up.yaml", "policy: up\nrules:\n  - id: echo\n    tools: [up_ehco]\n    action: reject\n"
                              "  - id: add\n    tools: [up_add]\n    when: args.c > 1\n    action: reject\n")
    write("gateway.yaml", yaml.safe_dump({"policies": ["policies"], "upstreams": [
        {"name": "up", "mcp": {"command": sys.executable, "args": [str(UPSTREAM_SERVER)]}}]}))
    out = gateway(tmp_path, "check", "--config", "gateway.yaml")
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if not line.startswith("  ")]
    policy = tmp_path / "policies" / "up.yaml"  # the config names the folder: paths are the config's
    assert errors[0] == (f"{policy}:4:13: error[unknown-tool]: no tool matches 'up_ehco'; the rule never"
                         " applies (rule up/echo); hint: did you mean 'up_echo'?")
    assert errors[1] == (f"{policy}:8:15: error[cel-field]: undefined field 'c' of args of up_add in 'args.c > 1'"
                         " (rule up/add); hint: the fields of args of up_add are: a, b")
    # offline: only what needs no catalog
    out = gateway(tmp_path, "check", "--config", "gateway.yaml", "--no-upstreams")
    assert out.returncode == 0, out.stderr


def test_check_config_fails_when_an_upstream_does_not_start(write, tmp_path):
    write("policies/up.yaml", "policy: up\nrules:\n  - id: echo\n    tools: [up_echo]\n    action: reject\n")
    down = write("down", "")
    write("gateway.yaml", yaml.safe_dump({"policies": ["policies"], "upstreams": [
        {"name": "up", "mcp": {"command": sys.executable, "args": [str(UPSTREAM_SERVER)],
                               "env": {"UPSTREAM_DOWN_FILE": str(down)}}}]}, sort_keys=False))
    out = gateway(tmp_path, "check", "--config", "gateway.yaml")
    assert out.returncode == 1
    first, line, caret = out.stderr.splitlines()[:3]
    assert first.startswith(f"{tmp_path / 'gateway.yaml'}:4:9: error[upstream-unavailable]: upstream 'up' did not"
                            " start: ")
    assert (line, caret) == ("  4 | - name: up", "    |         ^")


# --- test ----------------------------------------------------------------------------------------


def test_test_prints_failures_and_a_summary(project):
    out = run_subprocess(project, "test", "good")
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "FAIL good/pay_test.yaml:9: pay/wrong",
        "    decision: expected reject, got allow (decided by pay/allow-payments)",
        "2 passed, 1 failed",
    ]


def test_test_verbose_prints_every_case(project):
    out = gateway(project, "test", "-v", "good")
    assert out.stdout.splitlines()[:2] == ["PASS good/pay_test.yaml:3: pay/small", "PASS good/pay_test.yaml:6: pay/big"]


def test_test_run_filter_and_exit_codes(project):
    out = gateway(project, "test", "--run", "pay/(small|big)", "good")
    assert (out.returncode, out.stdout) == (0, "2 passed, 0 failed\n")
    out = gateway(project, "test", "--run", "nothing-matches", "good")
    assert out.returncode == 2
    assert out.stdout.splitlines() == ["no test ran (nothing matched --run 'nothing-matches')", "0 passed, 0 failed"]


def test_test_json(project):
    out = gateway(project, "test", "--format", "json", "good")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert (report["passed"], report["failed"], report["errors"], report["diagnostics"]) == (2, 1, 0, [])
    assert [(c["name"], c["status"], c["line"]) for c in report["cases"]] == [
        ("small", "PASS", 3), ("big", "PASS", 6), ("wrong", "FAIL", 9)
    ]
    assert report["cases"][1]["decision"]["decision"] == "approve"


def test_test_with_broken_policies_reports_errors(project, write):
    write("bad/broken_test.yaml", "cases:\n  - {name: one, call: {tool: t}, expect: {decision: allow}}\n")
    out = gateway(project, "test", "bad")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0] == "ERROR bad/broken_test.yaml:2: broken/one"
    assert lines[1].startswith("    bad/broken.yaml:5:5: error[unknown-key]: ")
    assert lines[-2:] == ["1 error(s)", "0 passed, 1 failed"]


def test_test_names_the_failing_step_of_a_sequence(project, write):
    write("seq/s.yaml", "policy: s\nrules:\n  - {id: second-call, when: session.calls >= 1, action: reject}\n")
    write("seq/s_test.yaml", """
        cases:
          - name: two calls
            steps:
              - call: {tool: a}
                expect: {decision: allow}
              - call: {tool: b}
                expect: {decision: allow}
    """)
    out = gateway(project, "test", "seq")
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "FAIL seq/s_test.yaml:2: s/two calls (step 2)",
        "    step 2 (b) at seq/s_test.yaml:6: decision: expected allow, got reject (decided by s/second-call: "
        "This call was rejected by policy.)",
        "0 passed, 1 failed",
    ]
    report = json.loads(gateway(project, "test", "seq", "--format", "json").stdout)
    assert report["cases"][0]["failed_step"] == 2
    assert [s["decision"] for s in report["cases"][0]["steps"]] == ["allow", "reject"]


# --- explain -------------------------------------------------------------------------------------


def test_explain_text(project):
    out = run_subprocess(project, "explain", "--policies", "good", "--call", "calls/big.json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:4] == [
        "decision: approve  (tool payments_transfer, stage request)",
        "decided by: pay/big",
        "message: Big transfer.",
        "approval needed (pay/big): approvers group:finance",
    ]
    assert "  + pay/big [approve] fired -> approve" in lines
    assert "      at good/pay.yaml:7:5  tools ['payments_transfer']" in lines


def test_explain_json(project, write):
    write("calls/other.yaml", "tool: search\nargs: {q: x}\n")
    out = gateway(project, "explain", "--format", "json", "--policies", "good", "--call", "calls/other.yaml")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["decision"], report["decided_by"], report["tool"], report["default"]) == (
        "reject", "default", "search", "reject")
    assert [(t["rule"], t["outcome"]) for t in report["trace"]] == [
        ("pay/allow-payments", "tool_not_matched"), ("pay/big", "tool_not_matched")
    ]


def test_explain_a_call_by_a_tokens_principal(project, write):
    write("issuers/only.yaml", "policy: only\nrules:\n  - id: other-idp\n"
          "    when: principal.kind == 'jwt' && principal.issuer != 'https://idp-a.example.com'\n"
          "    action: reject\n    message: Not our IdP.\n  - id: rest\n    action: allow\n")
    write("calls/b.yaml", "tool: search\nprincipal: {id: alice, kind: jwt, issuer: 'https://idp-b.example.com'}\n")
    write("calls/a.yaml", "tool: search\nprincipal: {id: alice, kind: jwt, issuer: 'https://idp-a.example.com'}\n")
    write("calls/no-issuer.yaml", "tool: search\nprincipal: {id: alice, kind: jwt}\n")
    b = gateway(project, "explain", "--format", "json", "--policies", "issuers", "--call", "calls/b.yaml")
    a = gateway(project, "explain", "--format", "json", "--policies", "issuers", "--call", "calls/a.yaml")
    assert (json.loads(b.stdout)["decided_by"], json.loads(a.stdout)["decided_by"]) == ("only/other-idp", "only/rest")
    bad = gateway(project, "explain", "--policies", "issuers", "--call", "calls/no-issuer.yaml")
    assert bad.returncode == 1 and bad.stderr.startswith("calls/no-issuer.yaml:2:12: error[")
    assert "names its token's 'issuer'" in bad.stderr


def test_explain_with_a_bad_call_file(project, write):
    write("calls/bad.json", '{"tool": "t", "argz": {}}')
    out = gateway(project, "explain", "--policies", "good", "--call", "calls/bad.json")
    assert out.returncode == 1
    assert out.stderr.startswith(
        "calls/bad.json:1:15: error[unknown-key]: unknown key 'argz'; hint: did you mean 'args'?")


# --- schema --------------------------------------------------------------------------------------


def test_schema_policy_is_a_json_schema_that_accepts_policies(project):
    out = run_subprocess(project, "schema", "policy")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    policy = yaml.safe_load((project / "good/pay.yaml").read_text())
    assert list(validator.iter_errors(policy)) == []
    wrong = [e.message for e in validator.iter_errors({"policy": "p", "rulez": []})]
    assert wrong == ["Additional properties are not allowed ('rulez' was unexpected)"]
    assert [e.message for e in validator.iter_errors({"policy": "p", "rules": [{"id": "r", "action": "permit"}]})]
