"""Decisions, on both CEL engines: every action, precedence, defaults, modes, failure policy,
variables, messages, the response stage, tool matching, revisions and tool visibility."""

from __future__ import annotations

import json

import pytest

from gateway.policy import ApprovalRequirement, Mode, Outcome, Stage, Verdict, load_policy_set

# --- one action at a time ------------------------------------------------------------------------


def test_allow_fires_and_decides(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: ok
            tools: [read]
            action: allow
    """)
    d = decide(ps, "read", {"path": "/a"})
    assert d.verdict is Verdict.ALLOW
    assert d.decided_by == "p/ok"
    assert d.message is None
    assert [(r.rule, r.outcome, r.effect) for r in d.rules] == [("p/ok", Outcome.FIRED, Verdict.ALLOW)]


def test_reject_carries_its_message_and_the_default_text_when_it_has_none(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: no-root
            when: args.path == "/"
            action: reject
            message: Not the root.
          - id: no-etc
            when: args.path == "/etc"
            action: reject
    """)
    d = decide(ps, "read", {"path": "/"})
    assert (d.verdict, d.decided_by, d.message) == (Verdict.REJECT, "p/no-root", "Not the root.")
    d = decide(ps, "read", {"path": "/etc"})
    assert (d.verdict, d.decided_by, d.message) == (Verdict.REJECT, "p/no-etc", "This call was rejected by policy.")
    d = decide(ps, "read", {"path": "/home"})
    assert (d.verdict, d.decided_by) == (Verdict.ALLOW, None)


def test_approve_carries_approvers_timeout_and_on_timeout(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: big
            when: args.amount > 100
            action: approve
            message: Big transfer.
            messageExpression: '"Transfer of " + string(args.amount)'
            approval: {approvers: ["group:finance", "alice", self], timeout: 1h30m, on_timeout: allow, via: elicitation}
    """)
    d = decide(ps, "transfer", {"amount": 500})
    assert d.verdict is Verdict.APPROVE
    assert d.message == "Transfer of 500"
    assert d.approvals == [ApprovalRequirement(
        rule="p/big", message="Transfer of 500", approvers=("group:finance", "alice", "self"),
        timeout_seconds=5400.0, on_timeout=Verdict.ALLOW, via="elicitation",
    )]
    assert decide(ps, "transfer", {"amount": 5}).approvals == []


def test_approve_without_an_approval_block_uses_the_defaults(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: any
            action: approve
            message: Someone must look.
          - id: timed
            action: approve
            approval: {timeout: 90}
    """)
    d = decide(ps, "t")
    # every fired approve rule is its own requirement, in load order
    assert [a.to_dict() for a in d.approvals] == [
        {"rule": "p/any", "message": "Someone must look.", "approvers": [], "timeout_seconds": 900.0,
         "on_timeout": "reject", "via": "page"},
        {"rule": "p/timed", "message": "", "approvers": [], "timeout_seconds": 90.0,
         "on_timeout": "reject", "via": "page"},
    ]
    assert (d.decided_by, d.message) == ("p/any", "Someone must look.")


def test_rewrite_sets_removes_and_redacts_without_touching_the_input(load, call):
    ps = load(r"""
        policy: p
        rules:
          - id: tidy
            action: rewrite
            rewrite:
              set: {limit: 'args.limit > 50 ? 50 : args.limit', filter.owner: '"me"'}
              remove: [debug, nested.secret]
              redact: ['\b\d{4}-\d{4}\b']
    """)
    args = {"limit": 500, "debug": True, "nested": {"secret": "s", "keep": 1}, "q": "card 1234-5678 ok"}
    c = call("search", args)
    d = ps.decide(c)
    assert d.verdict is Verdict.ALLOW
    assert d.args == {"limit": 50, "nested": {"keep": 1}, "q": "card [REDACTED] ok", "filter": {"owner": "me"}}
    assert d.original_args == args
    assert c.args == {"limit": 500, "debug": True, "nested": {"secret": "s", "keep": 1}, "q": "card 1234-5678 ok"}
    assert d.rewritten is True
    assert [(r.rule, r.outcome, r.rewritten, r.effect) for r in d.rules] == [
        ("p/tidy", Outcome.FIRED, True, None)
    ]


def test_a_rewrite_that_changes_nothing_is_fired_but_not_rewritten(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: drop-debug
            action: rewrite
            rewrite: {remove: [debug]}
    """)
    d = decide(ps, "t", {"q": 1})
    assert d.args == {"q": 1}
    assert (d.rules[0].outcome, d.rules[0].rewritten, d.rewritten) == (Outcome.FIRED, False, False)


def test_set_sees_earlier_rewrites_and_validations_see_the_final_args(load, decide):
    # The reject rule comes first in the file: rewrites still run before every validation rule.
    ps = load("""
        policy: p
        rules:
          - id: too-big
            when: args.limit > 10
            action: reject
          - id: double
            action: rewrite
            rewrite: {set: {limit: 'args.limit * 2'}}
          - id: cap
            action: rewrite
            rewrite: {set: {limit: 'args.limit > 8 ? 8 : args.limit', seen: 'args.limit'}}
    """)
    d = decide(ps, "t", {"limit": 6})
    assert d.args == {"limit": 8, "seen": 12}  # cap read 12, the value `double` produced
    assert d.original_args == {"limit": 6}
    assert d.verdict is Verdict.ALLOW
    assert [(r.rule, r.outcome) for r in d.rules] == [
        ("p/double", Outcome.FIRED), ("p/cap", Outcome.FIRED), ("p/too-big", Outcome.NOT_FIRED)
    ]


def test_sets_in_one_rule_all_read_the_args_from_before_that_rule(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: swap
            action: rewrite
            rewrite: {set: {a: 'args.b', b: 'args.a'}}
    """)
    assert decide(ps, "t", {"a": 1, "b": 2}).args == {"a": 2, "b": 1}


def test_skip_returns_its_literal_result(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: dry-run
            when: env.stage == "staging"
            action: skip
            result: {deleted: false, note: skipped by policy}
    """)
    d = decide(ps, "files_delete", {"path": "/x"}, env={"stage": "staging"})
    assert (d.verdict, d.decided_by, d.result) == (
        Verdict.SKIP, "p/dry-run", {"deleted": False, "note": "skipped by policy"}
    )
    assert d.message == "This call was skipped by policy."
    d = decide(ps, "files_delete", {"path": "/x"}, env={"stage": "prod"})
    assert (d.verdict, d.result) == (Verdict.ALLOW, None)


def test_skip_computes_its_result_with_result_expression(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: echo
            action: skip
            resultExpression: '{"echo": args.q, "n": size(args.q)}'
    """)
    d = decide(ps, "t", {"q": "hello"})
    assert (d.verdict, d.result) == (Verdict.SKIP, {"echo": "hello", "n": 5})


def test_terminate_ends_the_run(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: budget
            when: session.calls >= 50
            action: terminate
            message: The budget is spent.
    """)
    d = decide(ps, "t", session={"calls": 50})
    assert (d.verdict, d.decided_by, d.message) == (Verdict.TERMINATE, "p/budget", "The budget is spent.")
    assert decide(ps, "t", session={"calls": 49}).verdict is Verdict.ALLOW


# --- precedence ----------------------------------------------------------------------------------

# Written least strict last, so that load order cannot explain the result.
LADDER = """
    policy: p
    rules:
      - {id: t, when: '"terminate" in args.fire', action: terminate}
      - {id: r, when: '"reject" in args.fire', action: reject}
      - {id: s, when: '"skip" in args.fire', action: skip, result: {skipped: true}}
      - {id: a, when: '"approve" in args.fire', action: approve}
      - {id: ok, when: '"allow" in args.fire', action: allow}
"""
ORDER = ["allow", "approve", "skip", "reject", "terminate"]


@pytest.mark.parametrize(
    ("fire", "verdict"),
    [
        (ORDER, Verdict.TERMINATE),
        (["allow", "approve", "skip", "reject"], Verdict.REJECT),
        (["allow", "approve", "skip"], Verdict.SKIP),
        (["allow", "approve"], Verdict.APPROVE),
        (["allow"], Verdict.ALLOW),
        (["terminate", "allow"], Verdict.TERMINATE),
        (["reject", "approve"], Verdict.REJECT),
        (["skip", "approve"], Verdict.SKIP),
    ],
)
def test_strictest_fired_rule_wins(load, decide, fire, verdict):
    d = decide(load(LADDER), "t", {"fire": fire})
    assert d.verdict is verdict
    assert d.decided_by == {"terminate": "p/t", "reject": "p/r", "skip": "p/s", "approve": "p/a",
                            "allow": "p/ok"}[str(verdict)]
    assert sorted(str(r.effect) for r in d.rules if r.effect) == sorted(fire)


def test_among_equals_the_first_in_load_order_speaks(load, decide):
    # Files load in lexical path order (a.yaml before b.yaml), whatever the policy names.
    ps = load({
        "b.yaml": """
            policy: aaa
            rules:
              - {id: second, action: reject, message: from b}
        """,
        "a.yaml": """
            policy: zzz
            rules:
              - {id: first, action: reject, message: from a}
              - {id: also-first-file, action: reject, message: later in a}
        """,
    })
    d = decide(ps, "t")
    assert (d.decided_by, d.message) == ("zzz/first", "from a")
    assert [r.rule for r in d.rules] == ["zzz/first", "zzz/also-first-file", "aaa/second"]


# --- defaults ------------------------------------------------------------------------------------


def test_default_reject_refuses_what_no_rule_admits(load, decide):
    ps = load("""
        policy: p
        default: reject
        rules:
          - {id: reads, tools: [read], action: allow}
    """)
    assert ps.default is Verdict.REJECT
    d = decide(ps, "write")
    assert (d.verdict, d.decided_by, d.message) == (
        Verdict.REJECT, "default", "No policy allows calling the tool 'write'."
    )
    assert decide(ps, "read").verdict is Verdict.ALLOW


@pytest.mark.parametrize(
    ("defaults", "expected"),
    [
        ((None, None), Verdict.ALLOW),
        (("allow", None), Verdict.ALLOW),
        (("allow", "reject"), Verdict.REJECT),
        (("reject", "allow"), Verdict.REJECT),
    ],
)
def test_the_strictest_file_default_wins(load, decide, defaults, expected):
    files = {}
    for i, default in enumerate(defaults):
        line = f"default: {default}\n" if default else ""
        files[f"f{i}.yaml"] = f"policy: p{i}\n{line}rules:\n  - {{id: r, tools: [other], action: allow}}\n"
    ps = load(files)
    assert ps.default is expected
    assert decide(ps, "t").verdict is expected


def test_a_rewrite_alone_does_not_admit_under_default_reject(load, decide):
    ps = load("""
        policy: p
        default: reject
        rules:
          - {id: cap, action: rewrite, rewrite: {set: {limit: '10'}}}
    """)
    d = decide(ps, "t", {"limit": 99})
    assert (d.verdict, d.decided_by) == (Verdict.REJECT, "default")
    assert d.args == {"limit": 10}
    assert d.rules[0].outcome is Outcome.FIRED


# --- audit mode ----------------------------------------------------------------------------------


def test_audit_mode_records_but_never_changes_the_verdict(load, decide):
    ps = load("""
        policy: p
        default: reject
        defaults: {mode: audit}
        rules:
          - {id: stop, action: terminate}
          - {id: refuse, action: reject}
          - {id: wait, action: approve}
          - {id: dry, action: skip, result: {}}
          - {id: cap, action: rewrite, rewrite: {set: {limit: '1'}}}
          - {id: quiet, when: 'false', action: reject}
          - {id: broken, when: args.missing == 1, action: reject}
          - {id: admits, action: allow}
          - {id: enforced, tools: [read], action: allow, mode: enforce}
    """)
    d = decide(ps, "t", {"limit": 5})
    assert (d.verdict, d.decided_by) == (Verdict.REJECT, "default")  # an audited allow does not admit
    assert d.args == {"limit": 5}
    assert d.approvals == []
    assert d.result is None
    outcomes = {r.rule: (r.outcome, r.effect, r.mode) for r in d.rules}
    assert outcomes == {
        "p/stop": (Outcome.AUDIT, None, Mode.AUDIT),
        "p/refuse": (Outcome.AUDIT, None, Mode.AUDIT),
        "p/wait": (Outcome.AUDIT, None, Mode.AUDIT),
        "p/dry": (Outcome.AUDIT, None, Mode.AUDIT),
        "p/cap": (Outcome.AUDIT, None, Mode.AUDIT),
        "p/quiet": (Outcome.NOT_FIRED, None, Mode.AUDIT),
        "p/broken": (Outcome.ERROR, None, Mode.AUDIT),  # fails open: audit never denies
        "p/admits": (Outcome.AUDIT, None, Mode.AUDIT),
    }
    d = decide(ps, "read")
    assert (d.verdict, d.decided_by) == (Verdict.ALLOW, "p/enforced")


# --- failure policy ------------------------------------------------------------------------------


def test_on_error_deny_rejects_and_names_the_rule(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: needs-x, when: args.x == 1, action: allow}
    """)
    d = decide(ps, "t", {})
    assert (d.verdict, d.decided_by) == (Verdict.REJECT, "p/needs-x")
    assert d.message == "The policy rule p/needs-x could not be evaluated, so the call is denied."
    (r,) = d.rules
    assert (r.outcome, r.effect) == (Outcome.ERROR, Verdict.REJECT)
    assert r.error
    assert decide(ps, "t", {"x": 1}).verdict is Verdict.ALLOW


@pytest.mark.parametrize("where", ["rule", "file"])
def test_on_error_ignore_skips_the_rule_and_records_the_error(load, decide, where):
    rule_level = "on_error: ignore" if where == "rule" else ""
    file_level = "defaults: {on_error: ignore}" if where == "file" else ""
    ps = load(f"""
        policy: p
        {file_level}
        rules:
          - id: needs-x
            when: args.x == 1
            action: reject
            {rule_level}
    """)
    d = decide(ps, "t", {})
    assert (d.verdict, d.decided_by, d.message) == (Verdict.ALLOW, None, None)
    (r,) = d.rules
    assert (r.outcome, r.effect, r.message) == (Outcome.ERROR, None, None)
    assert r.error


def test_a_condition_of_the_wrong_type_at_run_time_is_an_error(load, decide):
    # args are dynamic, so only evaluation can tell that this `when` is a string.
    ps = load("""
        policy: p
        rules:
          - {id: flag, when: args.flag, action: allow}
    """)
    d = decide(ps, "t", {"flag": "yes"})
    assert (d.verdict, d.rules[0].outcome) == (Verdict.REJECT, Outcome.ERROR)
    assert d.rules[0].error == "expression must evaluate to bool, got string"
    assert decide(ps, "t", {"flag": True}).verdict is Verdict.ALLOW


def test_a_failing_rewrite_fails_closed(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: cap, action: rewrite, rewrite: {set: {limit: 'args.limit + 1'}}}
    """)
    d = decide(ps, "t", {})
    assert (d.verdict, d.decided_by, d.args) == (Verdict.REJECT, "p/cap", {})
    assert d.rules[0].outcome is Outcome.ERROR


# --- variables -----------------------------------------------------------------------------------


def test_variables_are_ordered_and_later_ones_read_earlier_ones(load, decide):
    ps = load("""
        policy: p
        variables:
          - {name: usd, expression: 'args.amount * (args.currency == "EUR" ? 2 : 1)'}
          - {name: big, expression: variables.usd > 100}
        rules:
          - {id: big, when: variables.big, action: reject, messageExpression: '"usd " + string(variables.usd)'}
    """)
    d = decide(ps, "t", {"amount": 60, "currency": "EUR"})
    assert (d.verdict, d.message) == (Verdict.REJECT, "usd 120")
    assert decide(ps, "t", {"amount": 60, "currency": "USD"}).verdict is Verdict.ALLOW


def test_variables_see_the_rewritten_args(load, decide):
    ps = load("""
        policy: p
        variables:
          - {name: n, expression: args.n}
        rules:
          - {id: bump, action: rewrite, rewrite: {set: {n: 'args.n + 1'}}}
          - {id: check, when: variables.n == 2, action: reject}
    """)
    assert decide(ps, "t", {"n": 1}).decided_by == "p/check"


def test_a_failing_variable_errors_the_rules_that_read_it_and_no_other(load, decide):
    ps = load("""
        policy: p
        variables:
          - {name: x, expression: args.x * 2}
          - {name: y, expression: variables.x + 1}
        rules:
          - {id: reads-y, when: variables.y > 0, action: reject}
          - {id: plain, when: args.other == 1, action: approve}
    """)
    d = decide(ps, "t", {"other": 1})
    outcomes = {r.rule: r.outcome for r in d.rules}
    assert outcomes == {"p/reads-y": Outcome.ERROR, "p/plain": Outcome.FIRED}
    assert (d.verdict, d.decided_by) == (Verdict.REJECT, "p/reads-y")
    assert "variables that failed: x" in (d.rules[0].error or "")


def test_variables_belong_to_their_own_file(load, decide):
    ps = load({
        "a.yaml": """
            policy: a
            variables: [{name: v, expression: '1'}]
            rules: [{id: r, when: variables.v == 1, action: approve}]
        """,
        "b.yaml": """
            policy: b
            variables: [{name: v, expression: '2'}]
            rules: [{id: r, when: variables.v == 2, action: skip, result: {}}]
        """,
    })
    d = decide(ps, "t")
    assert [(r.rule, r.outcome) for r in d.rules] == [("a/r", Outcome.FIRED), ("b/r", Outcome.FIRED)]


# --- messages ------------------------------------------------------------------------------------


def test_message_expression_wins_and_falls_back_to_message_when_it_fails(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: r
            action: reject
            message: static text
            messageExpression: '"about " + args.name'
    """)
    d = decide(ps, "t", {"name": "x"})
    assert (d.message, d.rules[0].error) == ("about x", None)
    d = decide(ps, "t", {})
    assert (d.verdict, d.message) == (Verdict.REJECT, "static text")
    assert d.rules[0].outcome is Outcome.FIRED
    assert (d.rules[0].error or "").startswith("messageExpression failed: ")


def test_a_failing_message_expression_without_message_falls_back_to_the_default_text(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: r, action: terminate, messageExpression: '"bye " + args.name'}
    """)
    d = decide(ps, "t", {})
    assert (d.verdict, d.message) == (Verdict.TERMINATE, "This agent run was terminated by policy.")


# --- response stage ------------------------------------------------------------------------------

RESPONSE = r"""
    policy: p
    default: reject
    rules:
      - id: allow-request
        tools: [read]
        action: allow
      - id: tag
        stage: response
        action: rewrite
        rewrite:
          set: {text: '"[checked] " + result.text'}
          redact: ['sk-\w+']
      - id: bad
        stage: response
        when: result.text.contains("forbidden")
        action: reject
        message: The tool returned something forbidden.
      - id: crash
        stage: response
        when: result.is_error
        action: terminate
"""


def test_response_rewrite_sets_and_redacts_the_result(load, decide):
    ps = load(RESPONSE)
    d = decide(ps, "read", {"q": 1}, stage="response",
               result={"text": "key sk-abc123 found", "structured": {"k": "sk-zz"}})
    assert d.stage is Stage.RESPONSE
    assert d.verdict is Verdict.ALLOW  # default reject does not apply at the response stage
    assert d.result == {"is_error": False, "text": "[checked] key [REDACTED] found",
                        "structured": {"k": "[REDACTED]"}, "content": []}
    assert d.args == {"q": 1}
    assert [r.rule for r in d.rules] == ["p/tag", "p/bad", "p/crash"]  # request rules not evaluated


def test_response_reject_and_terminate(load, decide):
    ps = load(RESPONSE)
    d = decide(ps, "read", stage="response", result={"text": "forbidden"})
    assert (d.verdict, d.decided_by, d.message) == (
        Verdict.REJECT, "p/bad", "The tool returned something forbidden."
    )
    d = decide(ps, "read", stage="response", result={"text": "forbidden", "is_error": True})
    assert (d.verdict, d.decided_by) == (Verdict.TERMINATE, "p/crash")


def test_default_reject_does_not_apply_at_the_response_stage(load, decide):
    ps = load(RESPONSE)
    d = decide(ps, "write", stage="response", result={"text": "fine"})
    assert (d.verdict, d.decided_by) == (Verdict.ALLOW, None)
    d = decide(ps, "write")
    assert (d.verdict, d.decided_by) == (Verdict.REJECT, "default")
    assert d.rules == []  # response rules are not evaluated at the request stage


# --- tool matching -------------------------------------------------------------------------------

MATCHING = """
    policy: p
    rules:
      - {id: exact, tools: [fs_read], action: allow}
      - {id: star, tools: ["fs_*"], action: allow}
      - {id: one-char, tools: ["db?"], action: allow}
      - {id: klass, tools: ["[ab]x"], action: allow}
      - {id: both, tools: [fs_read, "fs_*"], action: allow}
      - {id: everywhere, action: allow}
"""


@pytest.mark.parametrize(
    ("tool", "rules"),
    [
        ("fs_read", ["p/exact", "p/star", "p/both", "p/everywhere"]),
        ("fs_write", ["p/star", "p/both", "p/everywhere"]),
        ("fs", ["p/everywhere"]),
        ("db1", ["p/one-char", "p/everywhere"]),
        ("db12", ["p/everywhere"]),
        ("ax", ["p/klass", "p/everywhere"]),
        ("cx", ["p/everywhere"]),
        ("FS_READ", ["p/everywhere"]),  # case-sensitive
    ],
)
def test_rules_apply_only_to_the_tools_they_name(load, decide, tool, rules):
    d = decide(load(MATCHING), tool)
    assert [r.rule for r in d.rules] == rules


def test_conditions_of_rules_for_other_tools_are_not_evaluated(load, decide):
    # This condition would fail (and so deny) on any call; it must not run for other tools.
    ps = load("""
        policy: p
        rules:
          - {id: fragile, tools: [pay], when: args.amount > 0, action: allow}
    """)
    d = decide(ps, "search", {})
    assert (d.verdict, d.rules) == (Verdict.ALLOW, [])
    assert decide(ps, "pay", {}).verdict is Verdict.REJECT


# --- arguments -----------------------------------------------------------------------------------


def test_original_args_default_to_args_and_can_be_given(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: changed, when: args != original_args, action: approve}
    """)
    d = decide(ps, "t", {"a": 1})
    assert (d.verdict, d.original_args) == (Verdict.ALLOW, {"a": 1})
    d = decide(ps, "t", {"a": 1}, original_args={"a": 0})
    assert (d.verdict, d.args, d.original_args) == (Verdict.APPROVE, {"a": 1}, {"a": 0})


def test_rules_read_tool_principal_session_call_and_env(load, decide):
    ps = load("""
        policy: p
        rules:
          - id: all
            when: >-
              tool.name == "t" && tool.annotations.readOnlyHint == false &&
              principal.id == "alice" && "ops" in principal.groups && principal.claims.level == 3 &&
              session.calls == 4 && call.iteration == 2 && env.region == "eu"
            action: skip
            result: {}
    """)
    d = decide(ps, "t", principal={"id": "alice", "groups": ["ops"], "claims": {"level": 3}},
               session={"calls": 4}, call={"iteration": 2}, env={"region": "eu"})
    assert d.verdict is Verdict.SKIP
    d = decide(ps, "t", principal={"id": "bob", "groups": ["ops"], "claims": {"level": 3}},
               session={"calls": 4}, call={"iteration": 2}, env={"region": "eu"})
    assert d.verdict is Verdict.ALLOW


# --- revision and output shape -------------------------------------------------------------------


def test_revision_follows_the_file_contents(write, engine):
    path = write("p/policy.yaml", "policy: p\nrules: [{id: r, action: allow}]\n")
    first = load_policy_set([path.parent], engine=engine).revision
    assert load_policy_set([path.parent], engine=engine).revision == first
    write("p/policy.yaml", "policy: p\nrules: [{id: r, action: reject}]\n")
    second = load_policy_set([path.parent], engine=engine).revision
    assert second != first
    assert len(second) == 16
    write("p/policy.yaml", "policy: p\nrules: [{id: r, action: allow}]\n")
    assert load_policy_set([path.parent], engine=engine).revision == first


def test_decision_to_dict_shape(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: cap, action: rewrite, rewrite: {set: {limit: '5'}}}
          - {id: ask, when: args.limit == 5, action: approve, message: "ok?", approval: {approvers: [bob]}}
          - {id: never, when: 'false', action: reject}
    """)
    out = decide(ps, "t", {"limit": 9}).to_dict()
    assert json.loads(json.dumps(out)) == out
    assert isinstance(out.pop("elapsed_us"), float)
    for rule in out["rules"]:
        assert isinstance(rule.pop("elapsed_us"), float)
    assert out == {
        "decision": "approve",
        "stage": "request",
        "message": "ok?",
        "decided_by": "p/ask",
        "args": {"limit": 5},
        "original_args": {"limit": 9},
        "result": None,
        "approvals": [{"rule": "p/ask", "message": "ok?", "approvers": ["bob"], "timeout_seconds": 900.0,
                       "on_timeout": "reject", "via": "page"}],
        "rules": [
            {"rule": "p/cap", "action": "rewrite", "outcome": "fired", "mode": "enforce", "rewritten": True},
            {"rule": "p/ask", "action": "approve", "outcome": "fired", "mode": "enforce", "message": "ok?",
             "effect": "approve"},
            {"rule": "p/never", "action": "reject", "outcome": "not_fired", "mode": "enforce"},
        ],
        "revision": ps.revision,
        "labels": [],
    }


# --- tool visibility -----------------------------------------------------------------------------


def test_a_static_reject_for_the_principal_hides_the_tool(load, call):
    ps = load("""
        policy: p
        rules:
          - {id: no-interns, tools: [deploy], when: '"interns" in principal.groups', action: reject}
          - {id: not-in-prod, tools: [drop], when: env.stage == "prod", action: terminate}
    """)
    intern = {"id": "i", "groups": ["interns"]}
    assert ps.admits_tool(call("deploy", principal=intern)) is False
    assert ps.admits_tool(call("deploy", principal={"id": "o", "groups": ["ops"]})) is True
    assert ps.admits_tool(call("read", principal=intern)) is True
    assert ps.admits_tool(call("drop", env={"stage": "prod"})) is False
    assert ps.admits_tool(call("drop", env={"stage": "dev"})) is True


def test_a_reject_that_reads_the_tool_through_file_variables_hides_the_tool(load, call):
    ps = load("""
        policy: p
        variables:
          - {name: text, expression: 'tool.description + " " + tool.schema_text'}
          - {name: flagged, expression: 'variables.text.contains("<IMPORTANT>")'}
        rules:
          - {id: inlined, when: variables.flagged, action: reject}
          - {id: bound, tools: [b_*], when: 'has(variables.text) && variables.text.contains("SECRET")', action: reject}
          - {id: through-args, tools: [c_*], when: 'variables.text.contains(args.word)', action: reject}
    """)
    poisoned = {"name": "a_add", "input_schema": {"properties": {"x": {"description": "<IMPORTANT> read"}}}}
    assert ps.admits_tool(call(poisoned)) is False
    assert ps.decide(call(poisoned)).decided_by == "p/inlined"
    assert ps.admits_tool(call({"name": "a_add", "description": "Adds."})) is True
    assert ps.admits_tool(call({"name": "b_x", "description": "A SECRET step"})) is False  # bound, not inlined
    assert ps.admits_tool(call({"name": "b_x", "description": "plain"})) is True
    assert ps.admits_tool(call({"name": "c_x", "description": "SECRET"})) is True  # it reads args: it may not fire


def test_under_default_reject_only_admitted_tools_are_visible(load, call):
    ps = load("""
        policy: p
        default: reject
        rules:
          - {id: reads, tools: [read], action: allow}
          - {id: admins, tools: [admin], when: '"admins" in principal.groups', action: allow}
          - {id: audited, tools: [audited], action: allow, mode: audit}
    """)
    assert ps.admits_tool(call("read")) is True
    assert ps.admits_tool(call("write")) is False
    assert ps.admits_tool(call("admin", principal={"id": "a", "groups": ["admins"]})) is True
    assert ps.admits_tool(call("admin", principal={"id": "b"})) is False
    assert ps.admits_tool(call("audited")) is False


def test_rules_that_read_args_keep_the_tool_visible(load, call):
    ps = load("""
        policy: p
        default: reject
        rules:
          - {id: dev-only, tools: [deploy], when: args.env == "dev", action: allow}
          - {id: audited-reject, tools: [read], action: reject, mode: audit}
          - {id: read-ok, tools: [read], action: allow}
    """)
    assert ps.admits_tool(call("deploy")) is True  # an allow that reads args might admit
    assert ps.admits_tool(call("read")) is True  # an audited reject does not hide
    ps = load("""
        policy: p
        rules:
          - {id: no-force, tools: [push], when: args.force == true, action: reject}
          - {id: no-big, tools: [pay], when: variables.big, action: terminate}
        variables:
          - {name: big, expression: args.amount > 10}
    """)
    assert ps.admits_tool(call("push")) is True  # a reject that reads args might not fire
    assert ps.admits_tool(call("pay")) is True  # nor one that reads args through a variable


def test_a_tool_is_visible_when_its_static_rules_cannot_read_the_principal(load, call):
    ps = load("""
        policy: p
        rules:
          - {id: no-mallory, tools: [deploy], when: principal.id == "mallory", action: reject}
    """)
    huge = {"id": "alice", "claims": {"n": 2**70}}  # beyond CEL's 64-bit ints
    assert ps.admits_tool(call("deploy", principal=huge)) is True
    assert ps.decide(call("deploy", principal=huge)).verdict in (Verdict.ALLOW, Verdict.REJECT)


# --- inputs that must not crash a decision --------------------------------------------------------


def nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


def assert_decided_or_failed_closed(d, allowed: bool) -> None:
    """Either the expected answer, or a fail-closed reject because CEL could not take the input
    (the cel-python engine converts the whole input up front and refuses very deep values)."""
    if d.verdict is Verdict.REJECT:
        assert d.rules and all(r.outcome is Outcome.ERROR for r in d.rules)
        assert d.decided_by == d.rules[0].rule
    else:
        assert allowed and d.verdict is Verdict.ALLOW


def test_deeply_nested_args_are_decided(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: r, when: args.n == 1, action: reject}
    """)
    assert_decided_or_failed_closed(decide(ps, "t", {"n": nested(600)}), allowed=True)


def test_deeply_nested_args_with_a_rewrite_are_decided(load, decide):
    ps = load("""
        policy: p
        rules:
          - {id: tag, action: rewrite, rewrite: {set: {tagged: 'true'}}}
    """)
    d = decide(ps, "t", {"n": nested(600)})
    assert_decided_or_failed_closed(d, allowed=True)
    if d.verdict is Verdict.ALLOW:
        assert d.args["tagged"] is True
