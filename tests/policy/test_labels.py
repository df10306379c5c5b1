"""Label rules (issue 21): their shape at load, with positions, and what they add at both stages, on both engines.

A label rule adds labels to the run and no verdict; an audit one records them only; a labelsExpression that
gives something that is not a list of valid labels is an evaluation error, so the call fails closed.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import CelEvaluationError
from gateway.core.limits import MAX_LABEL_CHARS, MAX_LABELS_PER_RULE
from gateway.policy import PolicySet, check_policies
from gateway.policy.call import ResultInfo, SessionInfo, ToolCall, ToolInfo
from gateway.policy.decision import Outcome, Stage, Verdict
from gateway.policy.labels import checked_labels, label_problem

pytestmark = pytest.mark.both_engines

FLOWS = """\
policy: flows
rules:
  - id: web-content-is-untrusted
    tools: ["web_*", "mail_read"]
    stage: response
    action: label
    labels: [untrusted, "source:web"]
  - id: secrets-in-results
    tools: ["web_*"]
    stage: response
    action: label
    when: 'result.text.contains("BEGIN PRIVATE KEY")'
    labelsExpression: '["secret", "untrusted"]'
  - id: asked-for-secrets
    tools: [vault_read]
    action: label
    labelsExpression: 'args.names.map(n, "secret:" + n)'
  - id: would-be-pii
    tools: [crm_get]
    action: label
    mode: audit
    labels: [pii]
  - id: nothing-leaves-after-untrusted-content
    when: '"untrusted" in session.labels && tool.annotations.openWorldHint && !tool.annotations.readOnlyHint'
    action: approve
    message: This run read untrusted content; sending data out needs a person.
"""


@pytest.fixture
def check(tmp_path: Path, engine: str):
    counter = iter(range(1000))

    def _check(text: str) -> tuple[PolicySet | None, list[Diagnostic]]:
        root = tmp_path / f"p{next(counter)}"
        root.mkdir()
        (root / "policy.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
        return check_policies([root], engine)
    return _check


@pytest.fixture
def flows(check) -> PolicySet:
    policy_set, diagnostics = check(FLOWS)
    assert policy_set is not None, [d.format() for d in diagnostics]
    return policy_set


def errors(check, text: str) -> list[tuple[str, int, int, str | None]]:
    policy_set, diagnostics = check(text)
    found = [d for d in diagnostics if d.severity is Severity.ERROR]
    assert policy_set is None and found, [d.format() for d in diagnostics]
    assert all(d.hint for d in found)
    return [(d.code, d.line, d.column, d.rule) for d in found]


def label_rule(extra: str, action: str = "label") -> str:
    return f"policy: p\nrules:\n  - id: r\n    action: {action}\n{extra}"


def response(tool: str, text: str, **session: Any) -> ToolCall:
    return ToolCall(ToolInfo(tool), {}, session=SessionInfo("run", **session), stage=Stage.RESPONSE,
                    result=ResultInfo(text=text))


# --- shape -------------------------------------------------------------------------------------


def test_a_label_rule_needs_labels_or_a_labels_expression(check):
    assert errors(check, label_rule("")) == [("missing-key", 4, 13, "p/r")]
    assert errors(check, label_rule("    labels: [a]\n    labelsExpression: '[\"b\"]'\n")) == [
        ("conflicting-keys", 6, 5, "p/r")]
    assert errors(check, label_rule("    labels: []\n")) == [("invalid-value", 5, 13, "p/r")]


@pytest.mark.parametrize(("key", "text"), [
    ("message", "message: hi"), ("messageExpression", "messageExpression: '\"hi\"'"),
    ("approval", "approval: {approvers: [group:x]}"), ("rewrite", "rewrite: {remove: [a]}"),
    ("result", "result: {text: x}"), ("resultExpression", "resultExpression: '1'"),
])
def test_a_label_rule_takes_nothing_but_labels(check, key, text):
    assert errors(check, label_rule(f"    labels: [a]\n    {text}\n")) == [("misplaced-key", 6, 5, "p/r")]


@pytest.mark.parametrize("key", ["labels: [a]", "labelsExpression: '[\"a\"]'"])
def test_other_actions_take_no_labels(check, key):
    assert errors(check, label_rule(f"    {key}\n", "reject")) == [("misplaced-key", 5, 5, "p/r")]


@pytest.mark.parametrize(("label", "column"), [
    ('"with space"', 18), ('"-dash-first"', 18), ('""', 18), (f'"{"x" * (MAX_LABEL_CHARS + 1)}"', 18),
])
def test_static_labels_are_checked_with_positions(check, label, column):
    assert errors(check, label_rule(f"    labels: [ok, {label}]\n")) == [("invalid-label", 5, column, "p/r")]


def test_a_rule_gives_at_most_so_many_labels(check):
    many = ", ".join(f"l{i}" for i in range(MAX_LABELS_PER_RULE + 1))
    assert errors(check, label_rule(f"    labels: [{many}]\n")) == [("invalid-label", 5, 13, "p/r")]
    fine = ", ".join(f"l{i}" for i in range(MAX_LABELS_PER_RULE))
    assert check(label_rule(f"    labels: [{fine}, l0]\n"))[0] is not None


def test_label_rules_run_at_either_stage_but_decide_no_items(check):
    assert check(label_rule("    stage: response\n    labels: [a]\n"))[0] is not None
    assert errors(check, label_rule("    resources: ['file://*']\n    labels: [a]\n"))[0][0] == "invalid-item-action"


@pytest.mark.parametrize(("expression", "ok"), [
    ('["a"]', True), ("[]", True), ('result.text.contains("x") ? ["x"] : []', True), ("args.tags", True),
    ('"a"', False), ("1", False), ("[1]", False), ('{"a": 1}', False),
])
def test_a_labels_expression_must_give_a_list_of_strings(check, expression, ok):
    policy_set, diagnostics = check(label_rule(f"    stage: response\n    labelsExpression: '{expression}'\n"))
    if ok:
        assert policy_set is not None, [d.format() for d in diagnostics]
    else:
        assert [(d.code, d.line, d.column) for d in diagnostics] == [("cel-type", 6, 23)]


def test_static_labels_keep_their_order_once_each(check):
    policy_set, _ = check(label_rule("    labels: [b, a, b]\n"))
    assert policy_set is not None and policy_set.rules[0].labels == ("b", "a")


# --- evaluation --------------------------------------------------------------------------------


def test_response_stage_labels_in_rule_order_once_each(flows):
    decision = flows.decide(response("web_fetch", "-----BEGIN PRIVATE KEY-----"))
    assert decision.verdict is Verdict.ALLOW
    assert decision.labels == ("untrusted", "source:web", "secret")
    by_rule = {r.rule: r for r in decision.rules}
    assert by_rule["flows/web-content-is-untrusted"].labels == ("untrusted", "source:web")
    assert by_rule["flows/secrets-in-results"].labels == ("secret", "untrusted")
    assert by_rule["flows/secrets-in-results"].effect is None
    assert decision.to_dict()["labels"] == ["untrusted", "source:web", "secret"]


def test_a_label_rule_whose_when_is_false_adds_nothing(flows):
    decision = flows.decide(response("web_fetch", "hello"))
    assert decision.labels == ("untrusted", "source:web")
    assert {r.rule: r.outcome for r in decision.rules}["flows/secrets-in-results"] is Outcome.NOT_FIRED


def test_request_stage_labels_from_the_final_arguments(flows):
    decision = flows.decide(ToolCall(ToolInfo("vault_read"), {"names": ["db", "api"]}))
    assert decision.verdict is Verdict.ALLOW and decision.labels == ("secret:db", "secret:api")


def test_an_audit_label_rule_records_its_labels_and_adds_none(flows):
    decision = flows.decide(ToolCall(ToolInfo("crm_get"), {}))
    assert decision.labels == ()
    (result,) = [r for r in decision.rules if r.rule == "flows/would-be-pii"]
    assert result.outcome is Outcome.AUDIT and result.labels == ("pii",)


def test_a_label_rule_contributes_no_verdict_so_the_default_decides(check):
    policy_set, _ = check("policy: p\ndefault: reject\nrules:\n  - id: r\n    action: label\n    labels: [a]\n")
    assert policy_set is not None
    decision = policy_set.decide(ToolCall(ToolInfo("t")))
    assert decision.verdict is Verdict.REJECT and decision.decided_by == "default" and decision.labels == ("a",)


def test_a_rule_reads_the_runs_labels(flows):
    mail = ToolCall(ToolInfo("mail_send"), {"to": "x"}, session=SessionInfo("run", labels=["untrusted"]))
    assert flows.decide(mail).verdict is Verdict.APPROVE
    clean = ToolCall(ToolInfo("mail_send"), {"to": "x"}, session=SessionInfo("run"))
    assert flows.decide(clean).verdict is Verdict.ALLOW


@pytest.mark.parametrize("names", [[1], ["has space"], ["x" * (MAX_LABEL_CHARS - 6)],
                                   [f"n{i}" for i in range(MAX_LABELS_PER_RULE + 1)]])
def test_a_bad_computed_label_fails_closed(flows, names):
    decision = flows.decide(ToolCall(ToolInfo("vault_read"), {"names": names}))
    assert decision.verdict is Verdict.REJECT and decision.labels == ()
    (result,) = [r for r in decision.rules if r.rule == "flows/asked-for-secrets"]
    assert result.outcome is Outcome.ERROR and result.error
    assert decision.message == "The policy rule flows/asked-for-secrets could not be evaluated, so the call is denied."


def test_a_computed_label_error_follows_on_error_ignore(check):
    policy_set, _ = check(label_rule("    on_error: ignore\n    labelsExpression: 'args.tags'\n"))
    assert policy_set is not None
    decision = policy_set.decide(ToolCall(ToolInfo("t"), {"tags": "not a list"}))
    assert decision.verdict is Verdict.ALLOW and decision.labels == ()
    assert decision.rules[0].outcome is Outcome.ERROR


def test_label_values_are_checked_in_one_place():
    assert label_problem("pii:email") is None and label_problem("a.b-c_d") is None
    assert label_problem(":x") and label_problem(3) and label_problem("x" * (MAX_LABEL_CHARS + 1))
    assert checked_labels(["a", "b", "a"]) == ("a", "b")
    with pytest.raises(CelEvaluationError, match="list of strings"):
        checked_labels("a")


def test_a_rule_reads_the_runs_history(check):
    policy_set, _ = check("""\
        policy: p
        rules:
          - id: no-mail-after-reading-untrusted-mail
            tools: [mail_send]
            when: 'session.history.exists(h, h.tool == "mail_read" && "untrusted" in h.labels)'
            action: reject
        """)
    assert policy_set is not None
    read = {"tool": "mail_read", "verdict": "allow", "rule": "", "labels": ["untrusted"], "time": "2026-01-01T00:00Z"}
    after = ToolCall(ToolInfo("mail_send"), {}, session=SessionInfo("run", history=[read]))
    assert policy_set.decide(after).verdict is Verdict.REJECT
    clean = ToolCall(ToolInfo("mail_send"), {}, session=SessionInfo("run", history=[{**read, "labels": []}]))
    assert policy_set.decide(clean).verdict is Verdict.ALLOW


def test_the_runs_values_may_come_as_any_sequence_or_mapping(flows):
    session = SessionInfo("run", labels=("untrusted",), tallies=MappingProxyType({"x": 1.0}),
                          seen=MappingProxyType({"x": ("a",)}), history=())
    decision = flows.decide(ToolCall(ToolInfo("mail_send"), {"to": "x"}, session=session))
    assert decision.verdict is Verdict.APPROVE, decision.rules
