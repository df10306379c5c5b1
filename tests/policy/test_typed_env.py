"""The typed CEL environment: the mistakes a newcomer makes are load errors, on both engines.

Each test loads the hostile policy the way `gateway check` does and asserts the diagnostic (code,
file:line:col, rule, did-you-mean, hint); where a mistake used to load, the test would fail on the
old behaviour because the set loaded. Decisions are made on real calls where the fix is at run time.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.policy import Outcome, PolicySet, Verdict, check_policies
from gateway.policy.catalog import Catalog, CatalogTool
from gateway.policy.cel import VARIABLES
from tests.conftest import make_call

REPO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "repo": {"$ref": "#/$defs/Repo"},
        "branch": {"type": "string"},
        "limit": {"type": "integer"},
        "labels": {"type": "array", "items": {"$ref": "#/$defs/Label"}},
    },
    "required": ["repo", "branch"],
    "$defs": {
        "Repo": {"type": "object", "properties": {"owner": {"type": "string"}, "name": {"type": "string"}},
                 "required": ["owner", "name"]},
        "Label": {"type": "object", "properties": {"name": {"type": "string"}, "child": {"$ref": "#/$defs/Label"}},
                  "required": ["name"]},
    },
}
CATALOG = Catalog.of([
    CatalogTool("github_push", "github", input_schema=REPO_SCHEMA),
    CatalogTool("github_list_issues", "github", input_schema={
        "type": "object", "properties": {"repo": {"type": "string"}, "state": {"enum": ["open", "closed"]}},
        "required": ["repo"]}),
    CatalogTool("search", "web", input_schema={
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": True}),
])


@pytest.fixture
def check(tmp_path: Path, engine: str):
    """``check(policy_text, **typing)`` → (set or None, diagnostics, file)."""
    counter = iter(range(1000))

    def _check(text: str, **typing: Any) -> tuple[PolicySet | None, list[Diagnostic], str]:
        root = tmp_path / f"p{next(counter)}"
        root.mkdir()
        (root / "policy.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
        policy_set, diagnostics = check_policies([root], engine, **typing)
        return policy_set, diagnostics, str(root / "policy.yaml")
    return _check


@pytest.fixture
def error(check):
    """The one error of a policy that must not load."""
    def _error(text: str, **typing: Any) -> Diagnostic:
        policy_set, diagnostics, file = check(text, **typing)
        errors = [d for d in diagnostics if d.severity is Severity.ERROR]
        assert policy_set is None, "the mistake loaded"
        assert len(errors) == 1, [d.format() for d in diagnostics]
        assert errors[0].file == file
        return errors[0]
    return _error


@pytest.fixture
def loads(check):
    """The warnings of a policy that must load."""
    def _loads(text: str, **typing: Any) -> list[Diagnostic]:
        policy_set, diagnostics, _ = check(text, **typing)
        assert policy_set is not None, [d.format() for d in diagnostics]
        return diagnostics
    return _loads


def rule(when: str, tools: str = "", extra: str = "") -> str:
    """A one-rule policy ``t`` with rule ``r``; ``when`` on line 5, its text at column 11."""
    return f"policy: t\nrules:\n  - id: r\n    action: reject\n    when: {when}\n{tools}{extra}"


def at(d: Diagnostic) -> tuple[str, int, int, str | None]:
    return (d.code, d.line, d.column, d.rule)


# --- declared fields ---------------------------------------------------------------------------


def test_a_misspelled_principal_field_is_a_load_error_with_did_you_mean(error):
    d = error(rule("'\"admins\" in principal.grups'"))
    assert at(d) == ("cel-field", 5, 33, "t/r")  # the '.' before grups
    assert "undefined field 'grups' of principal (did you mean 'groups'?)" in d.message
    assert d.hint == "the fields of principal are: claims, groups, id, issuer, kind"


@pytest.mark.parametrize(("expression", "field", "meant"), [
    ("session.cals > 3", "cals", "calls"),
    ("call.iteraton > 3", "iteraton", "iteration"),
    ('tool.upstrem == "x"', "upstrem", "upstream"),
    ('tool.schema_txt == "x"', "schema_txt", "schema_text"),
    ("tool.annotations.readOnlyHnt", "readOnlyHnt", "readOnlyHint"),
    ("result.is_eror", "is_eror", "is_error"),
])
def test_every_declared_variable_has_its_fields(error, expression, field, meant):
    d = error(rule(f"'{expression}'"))
    assert d.code == "cel-field"
    assert f"undefined field '{field}'" in d.message and f"did you mean '{meant}'" in d.message


def test_comparing_a_counter_with_a_string_is_a_load_error(error):
    d = error(rule("'session.calls > \"10\"'"))
    assert at(d) == ("cel-compile", 5, 26, "t/r")  # at the operator
    assert "no matching overload for '_>_' applied to '(int, string)'" in d.message


def test_claims_stay_dynamic_and_every_real_field_loads(loads):
    assert loads(rule(
        "'principal.claims.org.team == 1 && session.implicit == false && session.calls_by_tool[tool.name] > 1"
        " && call.iteration >= 0 && tool.annotations.readOnlyHint && size(result.content) >= 0"
        " && tool.schema_text.hiddenChars().size() == 0'")) == []


def test_an_index_with_a_literal_key_is_typed_and_other_keys_stay_dynamic(error, loads):
    d = error(rule("'session[\"calls\"] > \"10\"'"))
    assert "'(int, string)'" in d.message
    assert loads(rule("'tool.annotations[\"x-owner\"] == 1 && tool.annotations[\"readOnlyHint\"]'")) == []


def test_a_message_expression_must_be_a_string(error):
    d = error(rule("'true'", extra="    messageExpression: session.calls\n"))
    assert d.code == "cel-type" and "must evaluate to string, but it is int" in d.message


def test_a_when_that_reads_a_typed_string_is_a_load_error(error):
    d = error(rule("principal.id"))
    assert d.code == "cel-type" and "must evaluate to bool, but it is string" in d.message


# --- variables ----------------------------------------------------------------------------------

VARIABLES_POLICY = """\
policy: t
variables:
  - name: protected_branch
    expression: args.branch in ["main", "release"]
rules:
  - id: r
    action: reject
    when: variables.protected_brnach
"""


def test_a_misspelled_variable_is_a_load_error_with_did_you_mean(error):
    d = error(VARIABLES_POLICY)
    assert at(d) == ("cel-field", 8, 20, "t/r")
    assert "undefined field 'protected_brnach' of variables (did you mean 'protected_branch'?)" in d.message


def test_variables_are_typed_from_their_expressions(error):
    d = error(VARIABLES_POLICY.replace("variables.protected_brnach", "variables.protected_branch > 1"))
    assert d.code == "cel-compile" and "'(bool, int)'" in d.message


def test_a_variable_reads_only_the_ones_before_it(error):
    d = error("policy: t\nvariables:\n  - name: a\n    expression: variables.b\n  - name: b\n    expression: '1'\n"
              "rules:\n  - id: r\n    action: reject\n")
    assert d.code == "cel-field" and "undefined field 'b' of variables" in d.message and d.rule is None


COMMENT_POLICY = """\
policy: t
variables:
  - name: big
    expression: |
      args.amount > 100 // the caller's amount
rules:
  - id: r
    action: reject
    when: |
      // it's the amount that counts
      variables.big && principal.id != 'nobody'
"""


def test_a_comment_with_an_apostrophe_does_not_hide_a_variable(check, engine):
    policy_set, diagnostics, _ = check(COMMENT_POLICY)
    assert policy_set is not None and diagnostics == []
    small = policy_set.decide(make_call("pay", {"amount": 5}))
    assert small.verdict is Verdict.ALLOW and small.rules[0].outcome is Outcome.NOT_FIRED, small.rules
    big = policy_set.decide(make_call("pay", {"amount": 500}))
    assert big.verdict is Verdict.REJECT and big.decided_by == "t/r" and big.rules[0].outcome is Outcome.FIRED
    # the variable (its own comment and all) was written into the rule, found from the AST
    assert policy_set.rules[0].variables_needed == frozenset()
    assert policy_set.rules[0].variables_read == frozenset({"big"})
    assert policy_set.rules[0].references == frozenset({"args", "principal", "variables"})


@pytest.mark.both_engines
def test_an_expression_only_the_cpp_engine_runs_is_typed_by_the_front_end(check, engine):
    source = "'strings.quote(principal.id) != \"\" && \"%s\".format([args.x]) != .string(1)'"
    policy_set, diagnostics, _ = check(rule(source))
    if engine == "cel-python":  # the cel-python engine has no strings.quote
        assert policy_set is None and diagnostics[0].code == "cel-undeclared"
        return
    assert policy_set is not None and diagnostics == []
    # what it reads comes from the checked tree, not an assumption that it reads everything
    assert policy_set.rules[0].references == frozenset({"principal", "args"})


def test_a_string_that_looks_like_a_variable_is_not_one(check):
    policy_set, diagnostics, _ = check(rule("'tool.name == \"variables.nope\"'"))
    assert policy_set is not None and diagnostics == []
    assert policy_set.rules[0].references == frozenset({"tool"})
    assert policy_set.decide(make_call("variables.nope")).verdict is Verdict.REJECT


# --- the cost bound -----------------------------------------------------------------------------


def test_three_nested_comprehensions_over_arguments_are_refused(error):
    d = error(rule("'args.a.all(x, args.b.all(y, args.c.exists(z, x == y && y == z)))'"))
    assert at(d) == ("cel-cost", 5, 53, "t/r")  # the '(' of the third
    assert "exists() is comprehension number 3 nested over inputs of unbounded size" in d.message
    assert d.hint is not None and "variable" in d.hint


def test_the_cost_bound_follows_variables_computed_from_arguments(error):
    d = error("policy: t\nvariables:\n  - name: xs\n    expression: args.a.map(x, x)\nrules:\n  - id: r\n"
              "    action: reject\n    when: variables.xs.all(x, args.b.all(y, result.content.exists(z, x == y)))\n")
    assert d.code == "cel-cost"


def test_nesting_over_literals_and_config_is_not_counted(loads):
    assert loads(rule("'args.a.all(x, [1, 2].all(y, env.hosts.exists(h, principal.groups.exists(g, x == y))))'")) == []
    assert loads(rule("'args.a.all(x, x.b.all(y, y > 0))'")) == []


# --- args from the tool catalog -----------------------------------------------------------------

TOOLS_PUSH = "    tools: [github_push]\n"


def test_a_when_reading_a_string_argument_is_a_load_error_with_the_catalog(error, loads):
    d = error(rule("args.branch", TOOLS_PUSH), catalog=CATALOG)
    assert at(d) == ("cel-type", 5, 11, "t/r")
    assert d.message.startswith("expression must evaluate to bool, but it is string")
    assert loads(rule("args.branch", TOOLS_PUSH)) == []  # without a catalog, args is dynamic


def test_a_field_behind_a_ref_is_typed(error):
    d = error(rule("'args.repo.ownr == \"me\"'", TOOLS_PUSH), catalog=CATALOG)
    assert at(d) == ("cel-field", 5, 21, "t/r")
    assert "undefined field 'ownr' of args.repo (did you mean 'owner'?)" in d.message
    d = error(rule("'args.repo.owner > 3'", TOOLS_PUSH), catalog=CATALOG)
    assert "'(string, int)'" in d.message


def test_an_unknown_argument_name_is_an_error(error):
    d = error(rule("'args.brnch == \"main\"'", TOOLS_PUSH), catalog=CATALOG)
    assert d.code == "cel-field" and "did you mean 'branch'" in d.message
    assert d.hint == "the fields of args of github_push are: branch, labels, limit, repo"


def test_a_recursive_ref_and_list_items_are_typed(error, loads):
    warnings = loads(rule("'args.labels.exists(l, l.child.child.name == \"x\")'", TOOLS_PUSH), catalog=CATALOG)
    # labels and l.child are optional; a recursive $ref is typed one level deep, then dyn
    assert [(w.code, w.column) for w in warnings] == [("cel-optional-field", 16), ("cel-optional-field", 35)]
    d = error(rule("'args.labels.exists(l, l.nme == \"x\")'", TOOLS_PUSH), catalog=CATALOG)
    assert d.code == "cel-field" and "did you mean 'name'" in d.message


def test_a_rule_with_only_a_warning_is_kept_and_decides(check):
    """A warning is advice: the rule it names still loads and still refuses (a dropped reject rule lets calls by)."""
    policy_set, diagnostics, _ = check(rule("'args.limit > 10'", TOOLS_PUSH), catalog=CATALOG)
    assert [d.code for d in diagnostics] == ["cel-optional-field"]
    assert policy_set is not None and policy_set.summary()["rules"] == 1
    args = {"repo": {"owner": "o", "name": "n"}, "branch": "b", "limit": 11}
    assert policy_set.decide(make_call("github_push", args)).verdict is Verdict.REJECT


def test_reading_an_optional_argument_without_has_is_a_warning(loads):
    warnings = loads(rule("'args.limit > 10'", TOOLS_PUSH), catalog=CATALOG)
    assert [at(w) for w in warnings] == [("cel-optional-field", 5, 16, "t/r")]
    assert warnings[0].severity is Severity.WARNING and "has(args.limit)" in (warnings[0].hint or "")
    for guarded in ("'has(args.limit) && args.limit > 10'", "'!has(args.limit) || args.limit > 10'",
                    "'has(args.limit) ? args.limit > 10 : false'", "'\"limit\" in args && args.limit > 10'",
                    "'args.branch == \"main\"'"):
        assert loads(rule(guarded, TOOLS_PUSH), catalog=CATALOG) == [], guarded
    # a rule's message runs only when its `when` is true, so what the `when` proves guards it too
    message = "    messageExpression: '\"limit \" + string(args.limit)'\n"
    assert loads(rule("'has(args.limit) && args.limit > 10'", TOOLS_PUSH, message), catalog=CATALOG) == []
    (w,) = loads(rule("'args.branch == \"main\"'", TOOLS_PUSH, message), catalog=CATALOG)
    assert (w.code, w.line) == ("cel-optional-field", 7)


def test_several_tools_give_the_union_of_their_arguments(error, loads):
    both = "    tools: [github_push, github_list_issues]\n"
    assert loads(rule("'args.repo == \"x\"'", both), catalog=CATALOG) == []  # object vs string: dynamic
    warnings = loads(rule("'args.branch == \"main\"'", both), catalog=CATALOG)  # only one tool has it
    assert [w.code for w in warnings] == ["cel-optional-field"]
    d = error(rule("'args.stat == \"open\"'", both), catalog=CATALOG)
    assert "did you mean 'state'" in d.message
    # two tools whose `repo` objects differ: neither shape is imposed on the other
    fork_repo = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    other = Catalog.of([*CATALOG.tools.values(), CatalogTool("github_fork", input_schema={
        "type": "object", "properties": {"repo": fork_repo}})])
    for when in ("'args.repo.id == 1'", "'args.repo.owner == \"x\"'"):  # repo: only github_push requires it
        warnings = loads(rule(when, "    tools: [github_push, github_fork]\n"), catalog=other)
        assert [w.code for w in warnings] == ["cel-optional-field"], when


def test_unknown_tools_and_open_schemas_keep_args_dynamic(loads):
    assert loads(rule("'args.anything == 1'", "    tools: [not_in_catalog]\n"), catalog=CATALOG) == []
    assert loads(rule("'args.anything == 1 && args.q == \"x\"'", "    tools: [search]\n"), catalog=CATALOG) == []


def test_a_rewrite_must_set_a_value_of_the_arguments_type(error, loads):
    rewrite = "policy: t\nrules:\n  - id: r\n    tools: [github_push]\n    action: rewrite\n    rewrite:\n" \
              "      set:\n        {target}: {value}\n"
    d = error(rewrite.format(target="limit", value="'\"ten\"'"), catalog=CATALOG)
    assert at(d) == ("cel-type", 8, 9, "t/r") and "limit is int, but the expression is string" in d.message
    d = error(rewrite.format(target="repo.ownr", value="'\"me\"'"), catalog=CATALOG)
    assert d.code == "cel-field" and "did you mean 'owner'" in d.message
    assert loads(rewrite.format(target="limit", value="'10'"), catalog=CATALOG) == []


# --- env and usage from the config --------------------------------------------------------------

ENV = {"stage": "prod", "allowed_hosts": ["a.example"], "limits": {"daily": 10}}


def test_env_is_typed_from_the_config(error, loads):
    d = error(rule("'env.stage > 3'"), env=ENV)
    assert at(d) == ("cel-compile", 5, 22, "t/r") and "'(string, int)'" in d.message
    d = error(rule("'env.limits.daily > \"3\"'"), env=ENV)
    assert "'(int, string)'" in d.message
    d = error(rule("'\"a\" in env.allowed_hosts && env.allowed_hosts[0] + 1 > 2'"), env=ENV)
    assert "'(string, int)'" in d.message
    # a key this deployment does not set: a warning (a pack serves many deployments), with did-you-mean
    (w,) = loads(rule("'env.stag == \"prod\"'"), env=ENV)
    assert (w.code, w.severity) == ("cel-missing-field", Severity.WARNING) and "did you mean 'stage'" in w.message
    assert loads(rule("'env.stage == \"prod\" && \"x\" in env.allowed_hosts && env.limits.daily > 3'"), env=ENV) == []
    assert loads(rule("'env.stag == \"prod\"'")) == []  # no config: env is dynamic


@pytest.mark.skipif("usage" not in VARIABLES, reason="the usage variable comes with the run counters (issue 8)")
def test_usage_is_typed(error):
    d = error(rule("'usage.day.calls > \"5\"'"))
    assert "'(int, string)'" in d.message
    d = error(rule("'usage.dya.calls > 5'"), usage_windows=["day", "hour"])
    assert "did you mean 'day'" in d.message


def test_check_with_a_config_types_env(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(rule("'env.stage > 3'") + "  - id: r2\n    action: reject\n"
                                                  "    when: 'env.stag == \"prod\"'\n")
    (tmp_path / "gateway.yaml").write_text("policies: [policies]\nenv: {stage: prod}\n")
    run = run_cli(tmp_path, "check", "--config", "gateway.yaml")
    assert run.returncode == 1
    assert "p.yaml:5:22: error[cel-compile]: found no matching overload for '_>_' applied to '(string, int)'" \
        in run.stderr
    assert "p.yaml:8:15: warning[cel-missing-field]: env has no field 'stag' (did you mean 'stage'?)" in run.stdout
    no_config = run_cli(tmp_path, "check", "policies")
    assert no_config.returncode == 0 and no_config.stdout.startswith("ok:"), no_config.stdout + no_config.stderr


def test_env_keys_the_config_does_not_set_may_be_probed(loads):
    guarded = ("'has(env.egress_hosts) && \"x\" in env.egress_hosts'",
               "'(has(env.egress_hosts) ? env.egress_hosts : []).exists(h, h == tool.name)'")
    for when in guarded:
        assert loads(rule(when), env=ENV) == [], when
    warnings = loads(rule("'\"x\" in env.egress_hosts'"), env=ENV)  # not a typo of a key it has: a warning
    assert [at(w) for w in warnings] == [("cel-missing-field", 5, 22, "t/r")]


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.both_engines
@pytest.mark.parametrize("env", [None, {}, ENV])
def test_every_shipped_pack_and_example_loads_in_the_typed_environment(engine, env):
    paths = [ROOT / "policies", *sorted((ROOT / "examples").glob("*/policies"))]
    policy_set, diagnostics = check_policies(paths, engine, env=env, usage_windows=["hour", "day"])
    assert policy_set is not None, [d.format() for d in diagnostics if d.severity is Severity.ERROR]
    assert all(d.code == "cel-missing-field" for d in diagnostics), [d.format() for d in diagnostics]


def test_a_schema_that_reuses_definitions_is_typed_in_linear_time(loads):
    # each level refers to the next twice: without typing each $ref once, 2**40 objects
    defs = {f"L{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/L{i + 1}"},
                                                        "b": {"$ref": f"#/$defs/L{i + 1}"}}, "required": ["a", "b"]}
            for i in range(40)}
    defs["L40"] = {"type": "string"}
    hostile = Catalog.of([CatalogTool("deep", input_schema={"$ref": "#/$defs/L0", "$defs": defs})])
    started = time.thread_time()  # CPU time of this thread: other processes cannot inflate it
    assert loads(rule("'has(args.a.b.a.b.a)'", "    tools: [deep]\n"), catalog=hostile) == []
    assert time.thread_time() - started < 5


# --- how the caller was recognised ---------------------------------------------------------------

ISSUERS = """
policy: t
rules:
  - id: only-our-idp
    when: principal.kind == "jwt" && principal.issuer != "https://idp-a.example.com"
    action: reject
    message: Tokens from this issuer may not call tools.
  - id: no-anonymous-writes
    when: principal.kind == "anonymous" && !tool.annotations.readOnlyHint
    action: reject
    message: Anonymous callers only read.
"""


@pytest.mark.both_engines
def test_principal_issuer_and_kind_are_typed_and_decided_alike(check):
    policy_set, diagnostics, _ = check(ISSUERS)
    assert policy_set is not None and diagnostics == []
    principals = {
        "a": {"id": "alice", "kind": "jwt", "issuer": "https://idp-a.example.com"},
        "b": {"id": "alice", "kind": "jwt", "issuer": "https://idp-b.example.com"},
        "key": {"id": "alice"},
        "anonymous": {"groups": []},
    }
    verdicts = {name: policy_set.decide(make_call("write", principal=p)).verdict for name, p in principals.items()}
    assert verdicts == {"a": Verdict.ALLOW, "b": Verdict.REJECT, "key": Verdict.ALLOW, "anonymous": Verdict.REJECT}
    rejected = policy_set.decide(make_call("write", principal=principals["b"]))
    assert rejected.decided_by == "t/only-our-idp"


@pytest.mark.both_engines
def test_a_misspelled_or_mistyped_principal_kind_is_a_load_error(error):
    d = error(rule("'principal.knid == \"jwt\"'"))
    assert d.code == "cel-field" and "did you mean 'kind'?" in d.message
    typed = error(rule("'principal.issuer > 3'"))
    assert typed.code == "cel-compile" and "'(string, int)'" in typed.message  # issuer is a string, on both engines
