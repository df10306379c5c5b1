"""Broken policy files: every problem comes back as a diagnostic naming file, line, column, rule
and a hint, never as an exception, and all problems of a run are reported together."""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import PolicyLoadError
from gateway.policy import PolicySet, check_policies, load_policy_set

Found = tuple[str, int, int, str | None]  # (code, line, column, rule)


@pytest.fixture
def check(tmp_path: Path, engine: str):
    """``check(text)`` or ``check({"a.yaml": text})`` → (policy set or None, diagnostics, folder)."""
    def _check(files: str | dict[str, str]) -> tuple[PolicySet | None, list[Diagnostic], Path]:
        root = tmp_path / "policies"
        root.mkdir(exist_ok=True)
        for name, text in ({"policy.yaml": files} if isinstance(files, str) else files).items():
            (root / name).write_text(text, encoding="utf-8")
        policy_set, diagnostics = check_policies([root], engine)
        return policy_set, diagnostics, root
    return _check


@pytest.fixture
def errors(check):
    """``errors(text)`` → [(code, line, column, rule)] of the error diagnostics, each in policy.yaml."""
    def _errors(text: str) -> list[Found]:
        policy_set, diagnostics, root = check(text)
        found = [d for d in diagnostics if d.severity is Severity.ERROR]
        assert policy_set is None
        assert found, "a broken file must produce at least one error"
        assert {d.file for d in found} == {str(root / "policy.yaml")}
        return [(d.code, d.line, d.column, d.rule) for d in found]
    return _errors


@pytest.fixture
def error(check):
    """The one error diagnostic of a broken policy.yaml."""
    def _error(text: str) -> Diagnostic:
        policy_set, diagnostics, root = check(text)
        found = [d for d in diagnostics if d.severity is Severity.ERROR]
        assert policy_set is None
        assert len(found) == 1, [d.format() for d in diagnostics]
        assert found[0].file == str(root / "policy.yaml")
        return found[0]
    return _error


def at(d: Diagnostic) -> Found:
    return (d.code, d.line, d.column, d.rule)


# --- YAML ----------------------------------------------------------------------------------------


def test_yaml_syntax_error(error):
    d = error("policy: a\n  rules: []\n")
    assert at(d) == ("yaml-syntax", 2, 8, None)
    assert d.message == "YAML syntax error: mapping values are not allowed here"
    assert d.hint == "check indentation and quoting around this spot"


def test_tab_indentation_is_a_yaml_syntax_error(error):
    assert at(error("policy: a\nrules:\n  - id: r\n\taction: allow\n")) == ("yaml-syntax", 4, 1, None)


def test_duplicate_yaml_key(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n    action: reject\n")
    assert (d.code, d.line, d.column) == ("duplicate-key", 5, 5)
    assert d.message == "duplicate key 'action'"
    assert d.hint == "YAML keeps only the last value; remove one of them"


def test_duplicate_yaml_key_inside_a_rule_names_the_rule(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n    action: reject\n")
    assert d.rule == "a/r"


def test_top_level_must_be_a_mapping(error):
    d = error("- policy: a\n")
    assert at(d) == ("wrong-type", 1, 1, None)
    assert d.hint == "start with the keys of a PolicyFile"


# --- schema --------------------------------------------------------------------------------------


def test_unknown_key_suggests_the_closest_one(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n    whn: 'true'\n")
    assert at(d) == ("unknown-key", 5, 5, "a/r")
    assert d.message == "unknown key 'rules.0.whn'"
    assert d.hint == "did you mean 'when'?"


def test_unknown_key_with_no_close_match_lists_the_allowed_keys(error):
    d = error("policy: a\nzzzzzz: 1\n")
    assert at(d) == ("unknown-key", 2, 1, None)
    assert d.hint == "allowed keys here: default, defaults, description, policy, rules, tallies, variables"


def test_wrong_type(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n    tools: fetch\n")
    assert at(d) == ("wrong-type", 5, 12, "a/r")
    assert d.message.startswith("rules.0.tools: ")
    assert "(got 'fetch')" in d.message


def test_wrong_type_of_a_string_suggests_quoting(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: reject\n    message: {a: 1}\n")
    assert at(d) == ("wrong-type", 5, 14, "a/r")
    assert d.hint == "quote the value so YAML reads it as a string"


def test_invalid_enum_value_lists_the_choices(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: permit\n")
    assert at(d) == ("invalid-value", 4, 13, "a/r")
    assert d.hint == "use one of 'allow', 'reject', 'approve', 'rewrite', 'skip', 'terminate' or 'label'"


def test_invalid_duration(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: approve\n    approval: {timeout: soon}\n")
    assert at(d) == ("invalid-value", 5, 25, "a/r")
    assert "'soon' is not a duration" in d.message


def test_missing_key(error):
    d = error("policy: a\nrules:\n  - id: r\n    when: 'true'\n")
    assert at(d) == ("missing-key", 3, 5, "a/r")
    assert d.message == "missing required key 'rules.0.action'"
    assert d.hint == "add 'action' here"


def test_missing_policy_name(error):
    assert at(error("rules: []\n")) == ("missing-key", 1, 1, None)


def test_duplicate_rule_id(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n  - id: r\n    action: reject\n")
    assert at(d) == ("duplicate-rule", 5, 9, "a/r")
    assert d.message == "rule id 'r' is already used by rule #1 of this file"


def test_duplicate_policy_name_across_files(check):
    policy_set, diagnostics, root = check({
        "a.yaml": "policy: p\nrules: [{id: r, action: allow}]\n",
        "b.yaml": "# the same name again\npolicy: p\nrules: [{id: r, action: allow}]\n",
    })
    assert policy_set is None
    (d,) = diagnostics
    assert (d.code, d.file, d.line, d.column, d.rule) == ("duplicate-policy", str(root / "b.yaml"), 2, 9, None)
    assert d.message == f"policy name 'p' is already used in {root / 'a.yaml'}"


def test_misplaced_key(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n    result: {a: 1}\n")
    assert at(d) == ("misplaced-key", 5, 5, "a/r")
    assert d.message == "'result' only applies to action skip"
    assert d.hint == "remove 'result' or change the action to skip"


def test_rewrite_without_a_rewrite_block(error):
    assert at(error("policy: a\nrules:\n  - id: r\n    action: rewrite\n")) == ("missing-key", 4, 13, "a/r")


@pytest.mark.parametrize("action", ["skip", "approve", "allow"])
def test_response_stage_skip_approve_and_allow(error, action):
    extra = "    result: {}\n" if action == "skip" else ""
    d = error(f"policy: a\nrules:\n  - id: r\n    stage: response\n    action: {action}\n{extra}")
    assert at(d) == ("invalid-stage-action", 5, 13, "a/r")
    assert d.message == f"action {action} is not valid at the response stage"
    assert d.hint == "at the response stage use rewrite, reject, terminate or label"


def test_invalid_redact_regex(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: rewrite\n    rewrite:\n      redact: ['(unclosed']\n")
    assert at(d) == ("invalid-regex", 6, 16, "a/r")
    assert d.message.startswith("invalid regular expression '(unclosed': ")


def test_redact_pattern_too_long(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: rewrite\n    rewrite:\n      redact: ['" + "a" * 1001 + "']\n")
    assert at(d) == ("invalid-regex", 6, 16, "a/r")
    assert d.message == "redact pattern is too long"


def test_a_rewrite_that_changes_nothing(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: rewrite\n    rewrite: {}\n")
    assert at(d) == ("invalid-value", 5, 14, "a/r")
    assert d.message == "the rewrite block changes nothing"


def test_a_rewrite_that_changes_nothing_is_reported_after_another_error(errors):
    found = errors("policy: a\nrules:\n  - id: r1\n    when: argz\n    action: allow\n"
                   "  - id: r2\n    action: rewrite\n    rewrite: {}\n")
    assert [(code, line, rule) for code, line, _, rule in found] == [
        ("cel-undeclared", 4, "a/r1"), ("invalid-value", 8, "a/r2")]


def test_result_and_result_expression_conflict(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: skip\n    result: 1\n    resultExpression: '2'\n")
    assert at(d) == ("conflicting-keys", 6, 5, "a/r")


def test_empty_tools_list(error):
    d = error("policy: a\nrules:\n  - id: r\n    tools: []\n    action: allow\n")
    assert at(d) == ("invalid-value", 4, 12, "a/r")
    assert d.hint == "omit 'tools' to match every tool, or list names or globs"


def test_duplicate_variable(error):
    d = error("policy: a\nvariables:\n  - {name: v, expression: '1'}\n  - {name: v, expression: '2'}\n"
              "rules: [{id: r, action: allow}]\n")
    assert at(d) == ("duplicate-variable", 4, 12, None)


def test_expression_too_long(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: allow\n    when: " + "a" * 10_001 + "\n")
    assert at(d) == ("cel-too-long", 5, 11, "a/r")
    assert d.hint == "split it into variables"


def test_invalid_rewrite_path(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: rewrite\n    rewrite:\n      set: {'a..b': '1'}\n")
    assert at(d) == ("invalid-path", 6, 13, "a/r")


# --- CEL -----------------------------------------------------------------------------------------


def test_bad_cel_syntax_in_a_plain_scalar_points_at_the_character(error):
    #                                 col 11 ↓         ↓ col 21
    d = error("policy: a\nrules:\n  - id: r\n    when: args.x == )\n    action: allow\n")
    assert at(d) == ("cel-compile", 4, 21, "a/r")
    assert d.message.endswith(" in 'args.x == )'")
    assert d.hint == "check the CEL syntax near this column"


def test_bad_cel_syntax_in_a_quoted_scalar_skips_the_quote(error):
    #                                  quote at 11 ↓ ↓ 12      ↓ col 22
    d = error("policy: a\nrules:\n  - id: r\n    when: 'args.x == )'\n    action: allow\n")
    assert at(d) == ("cel-compile", 4, 22, "a/r")


def test_bad_cel_syntax_in_a_flow_mapping(error):
    d = error("policy: a\nrules:\n  - {id: r, action: allow, when: 'args.x == )'}\n")
    assert at(d) == ("cel-compile", 3, 45, "a/r")


def test_bad_cel_syntax_in_a_literal_block_names_the_line(error):
    # the block's indentation (6) is not part of the expression, the extra 2 spaces are: col 19
    d = error("policy: a\nrules:\n  - id: r\n    when: |\n      args.x == 1 &&\n        args.y == )\n"
              "    action: allow\n")
    assert at(d) == ("cel-compile", 6, 19, "a/r")


def test_bad_cel_syntax_after_an_escape_in_a_double_quoted_scalar(error):
    d = error('policy: a\nrules:\n  - id: r\n    when: "args.x == \\"a\\" + )"\n    action: allow\n')
    assert at(d) == ("cel-compile", 4, 30, "a/r")


def test_bad_cel_syntax_on_the_second_line_of_a_plain_scalar(error):
    d = error("policy: a\nrules:\n  - id: r\n    when: args.x == 1 &&\n      args.y == )\n    action: allow\n")
    assert at(d) == ("cel-compile", 5, 17, "a/r")


def test_bad_cel_in_a_rewrite_set_value(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: rewrite\n    rewrite:\n      set:\n"
              "        limit: 'args.x + )'\n")
    assert at(d) == ("cel-compile", 7, 26, "a/r")


def test_undeclared_variable(error):
    d = error("policy: a\nrules:\n  - id: r\n    when: 'args.x > 0 && secret == 1'\n    action: allow\n")
    assert at(d) == ("cel-undeclared", 4, 26, "a/r")
    assert "'secret'" in d.message
    assert d.hint == ("expressions may read only tool, args, original_args, principal, session, usage, call, env, "
                      "variables, result, request, resource, prompt and the documented functions")


def test_undeclared_variable_in_a_policy_variable_has_no_rule(error):
    d = error("policy: a\nvariables:\n  - {name: v, expression: 'size(argz)'}\nrules: []\n")
    assert at(d) == ("cel-undeclared", 3, 33, None)


def test_when_that_is_statically_a_string(error):
    d = error("policy: a\nrules:\n  - id: r\n    when: '\"yes\"'\n    action: allow\n")
    assert at(d) == ("cel-type", 4, 12, "a/r")
    assert d.message.startswith("expression must evaluate to bool")


def test_message_expression_that_is_statically_an_int(error):
    d = error("policy: a\nrules:\n  - id: r\n    action: reject\n    messageExpression: '1 + 2'\n")
    assert at(d) == ("cel-type", 5, 25, "a/r")
    assert d.message.startswith("expression must evaluate to string")


# --- several problems at once --------------------------------------------------------------------


def test_every_problem_of_a_file_is_reported_in_one_run(errors):
    found = errors(
        "policy: a\n"
        "rules:\n"
        "  - id: r1\n"
        "    action: allow\n"
        "    whn: x\n"                     # unknown key
        "  - id: r2\n"
        "    when: argz.q == 1\n"          # undeclared
        "    action: reject\n"
        "  - id: r3\n"
        "    action: skip\n"
        "    stage: response\n"            # skip at the response stage
        "  - id: r4\n"
        "    when: 'args.x == )'\n"        # syntax
        "    action: allow\n"
        "  - id: r2\n"                     # duplicate id
        "    action: allow\n"
    )
    assert [(code, line, rule) for code, line, _, rule in found] == [
        ("unknown-key", 5, "a/r1"),
        ("cel-undeclared", 7, "a/r2"),
        ("invalid-stage-action", 10, "a/r3"),
        ("cel-compile", 13, "a/r4"),
        ("duplicate-rule", 15, "a/r2"),
    ]


def test_problems_in_several_files_are_all_reported(check):
    policy_set, diagnostics, _root = check({
        "a.yaml": "policy: a\nrules: [{id: r, action: nope}]\n",
        "b.yaml": "policy: b\nrules: [{id: r, action: allow, when: 'argz'}]\n",
    })
    assert policy_set is None
    errors = [(Path(d.file).name, d.code) for d in diagnostics if d.severity is Severity.ERROR]
    assert errors == [("a.yaml", "invalid-value"), ("b.yaml", "cel-undeclared")]


def test_a_bad_top_level_value_does_not_hide_rule_errors(errors):
    found = errors("policy: a\ndefault: maybe\nrules:\n  - id: r\n    when: argz.x\n    action: allow\n")
    assert [code for code, *_ in found] == ["invalid-value", "cel-undeclared"]


def test_an_invalid_only_rule_does_not_also_warn_that_the_policy_is_empty(check):
    _, diagnostics, _ = check("policy: a\nrules:\n  - id: r\n    action: allow\n    whn: x\n")
    assert [d.code for d in diagnostics] == ["unknown-key"]


def test_load_policy_set_raises_with_every_error(write, engine):
    path = write("p/policy.yaml",
                 "policy: a\nrules:\n  - {id: r, action: nope}\n  - {id: s, when: argz, action: allow}\n")
    with pytest.raises(PolicyLoadError) as info:
        load_policy_set([path], engine=engine)
    assert info.value.code == "policy-load"
    assert [d.code for d in info.value.diagnostics] == ["invalid-value", "cel-undeclared"]
    assert str(info.value).splitlines() == [d.format() for d in info.value.diagnostics]
    assert str(info.value).startswith(f"{path}:3:21: error[invalid-value]: ")


# --- files ---------------------------------------------------------------------------------------


def test_an_empty_file_is_an_error(check):
    # An error, not a warning: a policy file truncated mid-save must not reload as "no rules".
    policy_set, diagnostics, root = check({
        "empty.yaml": "",
        "real.yaml": "policy: a\nrules: [{id: r, action: allow}]\n",
    })
    (d,) = diagnostics
    assert (d.code, d.severity, d.file, d.line, d.column) == (
        "empty-file", Severity.ERROR, str(root / "empty.yaml"), 1, 1)
    assert policy_set is None


def test_a_policy_without_rules_is_a_warning(check):
    policy_set, diagnostics, _root = check("policy: a\n")
    assert [(d.code, d.severity) for d in diagnostics] == [("empty-policy", Severity.WARNING)]
    assert policy_set is not None


def test_no_policy_files(tmp_path, engine):
    (tmp_path / "only_test.yaml").write_text("cases: []\n")  # suites are not policies
    policy_set, diagnostics = check_policies([tmp_path], engine)
    assert policy_set is None
    (d,) = diagnostics
    assert (d.code, d.file, d.line, d.column) == ("no-policies", str(tmp_path), 1, 1)
    assert d.hint == "policy files are *.yaml files that do not end in _test.yaml"


def test_a_missing_path(tmp_path, engine):
    policy_set, diagnostics = check_policies([tmp_path / "nope"], engine)
    assert policy_set is None
    assert [(d.code, d.file) for d in diagnostics] == [("not-found", str(tmp_path / "nope"))]


def test_a_file_that_is_not_utf8(tmp_path, engine):
    (tmp_path / "bad.yaml").write_bytes(b"policy: \xff\xfe\n")
    policy_set, diagnostics = check_policies([tmp_path], engine)
    assert policy_set is None
    assert [(d.code, d.file) for d in diagnostics] == [("encoding", str(tmp_path / "bad.yaml"))]


# --- hostile files: loading must return diagnostics, never raise or hang -------------------------
# These fail in the YAML layer, before any CEL engine is involved, so one engine is enough.
YAML_ONLY = pytest.mark.parametrize("engine", ["cel-expr-python"])


@YAML_ONLY
def test_a_recursive_alias_is_a_diagnostic(check):
    policy_set, _diagnostics, _ = check("policy: a\nx: &x [*x]\n")
    assert policy_set is None


@YAML_ONLY
def test_deep_nesting_is_a_diagnostic(check):
    policy_set, _diagnostics, _ = check("policy: a\nx: " + "[" * 1000 + "]" * 1000 + "\n")
    assert policy_set is None


class Overran(Exception):
    """The test body ran past its deadline (not an OSError, which the loader would catch)."""


@pytest.fixture
def deadline() -> Iterator[None]:
    """Raise Overran in this thread if the test body runs longer than two seconds."""
    def expire(signum: int, frame: object) -> None:
        raise Overran("took longer than 2 s")
    previous = signal.signal(signal.SIGALRM, expire)
    gc.disable()  # so the alarm cannot land in a gc callback, where the exception would be swallowed
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gc.enable()


@YAML_ONLY
def test_alias_expansion_is_bounded(check, deadline):
    lines = ["policy: a", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 6)]
    policy_set, _diagnostics, _ = check("\n".join(lines) + "\n")
    assert policy_set is None
