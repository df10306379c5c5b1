"""`gateway explain` for issue 21: the labels a label rule gives and added, and what a call adds to its tallies."""

from __future__ import annotations

import json

import pytest
from flow_support import approve_rule, distinct_tally, label_rule, policy, sum_tally

from gateway.policy.call import ResultInfo, SessionInfo, ToolCall, ToolInfo
from gateway.policy.decision import Stage
from gateway.policy.explain import explain, render_text

pytestmark = pytest.mark.both_engines

POLICY = policy("flows", tallies=[sum_tally(tools=["pay"]), distinct_tally("payees", ["pay"])], rules=[
    {"id": "cap", "tools": ["pay"], "action": "rewrite",
     "rewrite": {"set": {"amount": "args.amount > 900 ? 900 : args.amount"}}},
    approve_rule("ask", "session.tallies.transferred + double(args.amount) > 1000.0", tools=["pay"]),
    label_rule("untrusted", ["web"]),
    {"id": "computed", "tools": ["web"], "stage": "response", "action": "label",
     "labelsExpression": 'result.text.contains("key") ? ["secret"] : []'},
])


def test_label_rules_show_what_they_give_and_what_they_added(load):
    policy_set = load(POLICY)
    call = ToolCall(ToolInfo("web"), stage=Stage.RESPONSE, result=ResultInfo(text="a key"))
    report = explain(policy_set, call)
    assert json.loads(json.dumps(report)) == report
    assert report["labels"] == ["untrusted", "secret"]
    by_rule = {e["rule"]: e for e in report["trace"]}
    assert by_rule["flows/untrusted"]["adds"] == ["untrusted"] and by_rule["flows/untrusted"]["labels"] == ["untrusted"]
    assert by_rule["flows/computed"]["labels_expression"].startswith("result.text")
    assert by_rule["flows/computed"]["labels"] == ["secret"]
    assert "tallies" not in report
    text = render_text(report)
    assert "labels added to the run: untrusted, secret" in text
    assert "+ flows/computed [label] fired -> labels secret" in text


def test_a_call_matching_tallies_shows_what_it_would_add_on_its_final_arguments(load):
    policy_set = load(POLICY)
    call = ToolCall(ToolInfo("pay"), {"amount": 1500, "to": "bob"},
                    session=SessionInfo("run", tallies={"transferred": 200.0, "payees": 1}, seen={"payees": ["al"]}))
    report = explain(policy_set, call)
    assert report["decision"] == "approve" and report["tallies_counted"] == "when approved"
    transferred, payees = report["tallies"]
    assert (transferred["tally"], transferred["adds"], transferred["before"], transferred["after"]) == (
        "transferred", 900.0, 200.0, 1100.0)  # the rewritten amount, not the one asked for
    assert (payees["adds"], payees["before"], payees["after"]) == (["bob"], 1, 2)
    text = render_text(report)
    assert "this one: when approved" in text and "=> adds 900.0: 200.0 -> 1100.0" in text


def test_a_tally_that_cannot_be_computed_is_shown_as_refusing_the_call(load):
    policy_set = load(POLICY)
    report = explain(policy_set, ToolCall(ToolInfo("pay"), {"amount": 5, "to": 3}))
    payees = report["tallies"][1]
    assert "error" in payees and "payees" in payees["error"] and "after" not in payees
    assert "(the call is refused)" in render_text(report)
