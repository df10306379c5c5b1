"""`gateway explain` says why a `when` was false: the value of each top-level `&&` / `||` part, split
from a CEL parse (so operators inside strings, comments and parentheses stay whole), on both engines."""

from __future__ import annotations

from typing import Any

from gateway.policy.explain import explain, render_text

POLICY = """
    policy: p
    variables:
      - name: big
        expression: 'double(args.amount) > 1000.0'
    rules:
      - id: guarded
        tools: [pay]
        # it's a comment with an apostrophe, and "&&" inside it: neither splits anything
        when: >-
          args.memo == "a && b" && variables.big
          && ("finance" in principal.groups || args.force) // don't split here: it's a comment
        action: reject
        message: refused
      - id: either
        tools: [pay]
        when: args.currency == "EUR" || args.currency == "GBP" || size(args.to) > 40
        action: approve
        approval: {approvers: [bob]}
      - id: plain
        tools: [pay]
        when: args.amount > 1
        action: allow
"""


def _trace(report: dict[str, Any], rule: str) -> dict[str, Any]:
    return next(e for e in report["trace"] if e["rule"] == rule)


def test_each_top_level_clause_has_its_value(load, call):
    policy_set = load(POLICY)
    report = explain(policy_set, call("pay", {"memo": "a && b", "amount": 5, "currency": "USD", "to": "x",
                                              "force": True}, principal={"id": "al", "groups": ["finance"]}))
    guarded = _trace(report, "p/guarded")
    assert guarded["outcome"] == "not_fired"
    assert guarded["clause_operator"] == "&&"
    assert [(c["source"], c["value"]) for c in guarded["clauses"]] == [
        ('args.memo == "a && b"', True),
        ("variables.big", False),  # the file variable is bound, as when the rule ran: this is why
        ('("finance" in principal.groups || args.force)', True),
    ]
    either = _trace(report, "p/either")
    assert either["clause_operator"] == "||"
    assert [c["value"] for c in either["clauses"]] == [False, False, False]
    assert "clauses" not in _trace(report, "p/plain")  # one clause: its value is the outcome

    text = render_text(report)
    assert '           args.memo == "a && b"  => true\n        && variables.big  => false\n' in text
    assert '        || size(args.to) > 40  => false' in text


def test_a_clause_that_fails_shows_its_error(load, call):
    policy_set = load(POLICY)
    report = explain(policy_set, call("pay", {"memo": "zz", "amount": 5000, "currency": "USD"}))
    either = _trace(report, "p/either")
    assert either["outcome"] == "error"
    values = [c["value"] for c in either["clauses"]]
    assert values[:2] == [False, False]
    assert "error" in values[2] and "to" in values[2]["error"]  # args.to is missing: that part is the error
    assert "error: " in render_text(report)


def test_a_clause_reads_a_variable_holding_a_timestamp(load, call):
    # A variable's value bound again into an activation is not always accepted (the C++ engine refuses
    # a timestamp): clauses are compiled with the variables written in, as the rule is.
    policy_set = load("""
        policy: hours
        variables:
          - {name: local, expression: timestamp(call.time)}
          - {name: late, expression: variables.local.getHours() >= 18}
        rules:
          - id: no-late-deletes
            when: tool.name.startsWith("delete") && variables.late
            action: reject
    """)
    report = explain(policy_set, call("delete_all", call={"time": "2026-12-01T09:00:00Z"}))
    rule = _trace(report, "hours/no-late-deletes")
    assert rule["outcome"] == "not_fired"
    assert [(c["source"], c["value"]) for c in rule["clauses"]] == [
        ('tool.name.startsWith("delete")', True), ("variables.late", False)]
