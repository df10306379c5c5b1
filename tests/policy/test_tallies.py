"""Tallies (issue 21): load errors with positions, typing with did-you-mean, and what an admitted call adds,
on both engines; a value a tally may not count fails closed."""

from __future__ import annotations

import dataclasses
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
from flow_support import cap_rule, distinct_tally, policy, recipient_cap_rule, sum_tally

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import CelEvaluationError
from gateway.core.limits import MAX_SEEN_VALUE_CHARS
from gateway.policy import PolicySet, check_policies
from gateway.policy.call import SessionInfo, ToolCall, ToolInfo, UsageInfo
from gateway.policy.catalog import Catalog, CatalogTool
from gateway.policy.decision import Verdict
from gateway.policy.flow import Tallies, TallyChange
from gateway.policy.tallies import TallyError

pytestmark = pytest.mark.both_engines

FLOWS = policy("flows", tallies=[sum_tally(description="money moved by the run"), distinct_tally()], rules=[
    cap_rule(), recipient_cap_rule(2), cap_rule(5000, id="daily-cap", window="day", message=None)])


@pytest.fixture
def check(tmp_path: Path, engine: str):
    """``check(text or {name: text}, **typing)`` → (set or None, diagnostics, folder)."""
    counter = iter(range(1000))

    def _check(files: str | dict[str, str], **typing: Any) -> tuple[PolicySet | None, list[Diagnostic], Path]:
        root = tmp_path / f"p{next(counter)}"
        root.mkdir()
        for name, text in ({"policy.yaml": files} if isinstance(files, str) else files).items():
            (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
        policy_set, diagnostics = check_policies([root], engine, **typing)
        return policy_set, diagnostics, root
    return _check


@pytest.fixture
def flows(check) -> PolicySet:
    policy_set, diagnostics, _ = check(FLOWS)
    assert policy_set is not None, [d.format() for d in diagnostics]
    return policy_set


def errors(check, files: str | dict[str, str], **typing: Any) -> list[Diagnostic]:
    policy_set, diagnostics, _ = check(files, **typing)
    found = [d for d in diagnostics if d.severity is Severity.ERROR]
    assert policy_set is None and found, [d.format() for d in diagnostics]
    return found


def at(d: Diagnostic) -> tuple[str, int, int, str | None]:
    return (d.code, d.line, d.column, d.rule)


def transfer(amount: Any, **session: Any) -> ToolCall:
    return ToolCall(ToolInfo("payments_transfer"), {"amount": amount}, session=SessionInfo("run-1", **session),
                    usage={"day": UsageInfo()})


def tally(tid: str, kind: str, expression: str, tools: str = "[t]") -> str:
    return f"policy: p\ntallies:\n  - id: {tid}\n    tools: {tools}\n    {kind}: '{expression}'\n"


# --- loading -----------------------------------------------------------------------------------


def test_a_set_with_tallies_loads_with_zeros_and_flow(flows):
    assert [(t.id, t.kind, t.tools, t.policy) for t in flows.tallies] == [
        ("transferred", "sum", ("payments_transfer",), "flows"), ("recipients", "distinct", ("mail_*",), "flows")]
    assert flows.tallies[0].description == "money moved by the run"
    assert (flows.tallies[0].line, flows.tallies[0].column) == (3, 5)
    assert flows.zero.values == {"transferred": 0.0, "recipients": 0} and flows.zero.seen == {"recipients": []}
    assert flows.uses_flow


def test_a_set_without_tallies_or_label_rules_does_not_use_flow(check):
    policy_set, _, _ = check("policy: p\nrules:\n  - id: r\n    action: allow\n")
    assert policy_set is not None
    assert not policy_set.uses_flow and policy_set.tallies == () and policy_set.zero.values == {}


def test_a_file_of_only_tallies_is_not_an_empty_policy(check):
    policy_set, diagnostics, _ = check(tally("n", "sum", "1"))
    assert policy_set is not None and not [d for d in diagnostics if d.code == "empty-policy"]


def test_a_tally_needs_exactly_one_of_sum_and_distinct(check):
    both = errors(check, "policy: p\ntallies:\n  - id: n\n    tools: [t]\n    sum: '1'\n    distinct: '\"a\"'\n")
    assert [at(d) for d in both] == [("tally-kind", 6, 5, "tally p/n")]
    assert both[0].hint and "double(args.amount)" in both[0].hint
    neither = errors(check, "policy: p\ntallies:\n  - id: n\n    tools: [t]\n")
    assert [at(d) for d in neither] == [("tally-kind", 3, 5, "tally p/n")]
    assert "tally p/n" in neither[0].format() and "(rule " not in neither[0].format()


def test_a_tally_needs_tools_that_can_match(check):
    assert [at(d) for d in errors(check, "policy: p\ntallies:\n  - id: n\n    tools: []\n    sum: '1'\n")] == [
        ("invalid-value", 4, 12, "tally p/n")]
    assert [d.code for d in errors(check, "policy: p\ntallies:\n  - id: n\n    sum: '1'\n")] == ["missing-key"]
    assert [at(d) for d in errors(check, "policy: p\ntallies:\n  - id: n\n    tools: ['[z-a]']\n    sum: '1'\n")] \
        == [("invalid-value", 4, 13, "tally p/n")]


def test_a_tally_id_must_be_a_cel_field_name(check):
    found = errors(check, tally("spend-cap", "sum", "1"))
    assert found[0].code == "invalid-value" and found[0].line == 3


def test_a_tally_id_is_unique_across_the_set_naming_the_first_file(check):
    found = errors(check, {"a.yaml": tally("n", "sum", "1"), "b.yaml": tally("n", "sum", "2").replace("p\n", "q\n", 1)})
    assert [(d.code, Path(d.file).name, d.line, d.column, d.rule) for d in found] == [
        ("duplicate-tally", "b.yaml", 3, 9, "tally q/n")]
    assert "a.yaml" in found[0].message


@pytest.mark.parametrize(("expression", "ok"), [
    ("1", True), ("1u", True), ("2.5", True), ("args.amount", True), ("double(args.amount)", True),
    ('"x"', False), ("true", False), ("[1]", False), ("{}", False),
])
def test_a_sum_must_be_a_number(check, expression, ok):
    policy_set, diagnostics, _ = check(tally("n", "sum", expression))
    if ok:
        assert policy_set is not None, [d.format() for d in diagnostics]
        return
    assert [at(d) for d in diagnostics] == [("tally-type", 5, 10, "tally p/n")]
    assert diagnostics[0].hint and "double(" in diagnostics[0].hint


@pytest.mark.parametrize(("expression", "ok"), [
    ('"x"', True), ("args.to", True), ('["a", "b"]', True), ("args.to.map(x, x)", True),
    ("1", False), ("1.5", False), ("[1, 2]", False), ("true", False),
])
def test_a_distinct_tally_must_be_a_string_or_a_list_of_them(check, expression, ok):
    policy_set, diagnostics, _ = check(tally("n", "distinct", expression))
    if ok:
        assert policy_set is not None, [d.format() for d in diagnostics]
        return
    assert [at(d) for d in diagnostics] == [("tally-type", 5, 15, "tally p/n")]


@pytest.mark.parametrize("expression", ["result.text", "variables.x", "size(result.content)"])
def test_a_tally_reads_neither_result_nor_variables(check, expression):
    found = errors(check, tally("n", "distinct", expression))
    assert [d.code for d in found] == ["cel-undeclared"]
    assert found[0].hint and "result" not in found[0].hint and "args" in found[0].hint


def test_a_tally_is_typed_from_its_tools_in_the_catalog(check):
    catalog = Catalog.of([CatalogTool("pay", "p", input_schema={
        "type": "object", "properties": {"amount": {"type": "integer"}, "memo": {"type": "string"}}})])
    found = errors(check, tally("n", "sum", "args.amont", "[pay]"), catalog=catalog)
    assert [d.code for d in found] == ["cel-field"] and "did you mean 'amount'" in found[0].message
    found = errors(check, tally("n", "sum", "args.memo", "[pay]"), catalog=catalog)
    assert [d.code for d in found] == ["tally-type"] and "string" in found[0].message


# --- typing of what rules read -----------------------------------------------------------------


def rule_reading(when: str, files: str = "") -> str:
    return (f"policy: p\n{files}rules:\n  - id: r\n    action: reject\n    when: '{when}'\n")


TALLIES = ("tallies:\n  - id: spent\n    tools: [t]\n    sum: '1'\n"
           "  - id: people\n    tools: [t]\n    distinct: '\"a\"'\n")


@pytest.mark.parametrize("when", [
    "session.tallies.spent > 1.0", "session.tallies.people > 1", "size(session.seen.people) > 1",
    '"a" in session.seen.people', 'usage.day.tallies.spent > 2.0', 'usage.day.seen.people.exists(x, x == "b")',
    '"untrusted" in session.labels', 'session.history.exists(h, h.tool == "x" && h.verdict == "allow")',
    'session.history.exists(h, "secret" in h.labels && h.rule != "" && h.time != "")',
])
def test_what_a_rule_may_read_of_the_run(check, when):
    policy_set, diagnostics, _ = check(rule_reading(when, TALLIES), usage_windows=["day"])
    assert policy_set is not None, [d.format() for d in diagnostics]


@pytest.mark.parametrize(("when", "code", "column", "words"), [
    ("session.tallies.spnt > 1.0", "cel-field", 27, "did you mean 'spent'"),
    ("session.seen.spent.size() > 1", "cel-field", 24, "of session.seen"),
    ("usage.day.tallies.peple > 1", "cel-field", 29, "did you mean 'people'"),
    ('session.tallies.spent > "x"', "cel-compile", None, "'(double, string)'"),
    ("session.tallies.people > 1.5", "cel-compile", None, "'(int, double)'"),
    ("session.labels > 1", "cel-compile", None, "list(string)"),
    ("session.history.exists(h, h.tol == \"x\")", "cel-field", None, "did you mean 'tool'"),
])
def test_reading_the_run_wrongly_is_a_load_error(check, when, code, column, words):
    found = errors(check, rule_reading(when, TALLIES), usage_windows=["day"])
    assert [d.code for d in found] == [code], [d.format() for d in found]
    assert words in found[0].message and found[0].rule == "p/r" and found[0].line == 12
    if column is not None:
        assert found[0].column == column


def test_without_tallies_no_tally_may_be_read(check):
    found = errors(check, rule_reading("session.tallies.spent > 1.0"))
    assert [d.code for d in found] == ["cel-field"] and found[0].hint and "none" in found[0].hint


# --- run time ----------------------------------------------------------------------------------


def test_the_run_reads_zeros_before_any_call_counts(flows):
    decision = flows.decide(transfer(600))
    assert decision.verdict is Verdict.ALLOW, decision.rules


def test_rules_read_the_runs_and_the_windows_tallies(flows):
    assert flows.decide(transfer(600, tallies={"transferred": 500.0})).verdict is Verdict.REJECT
    assert flows.decide(transfer(300, tallies={"transferred": 500.0})).verdict is Verdict.ALLOW
    # a stored sum that reads back as an int is a double to CEL, as the typed environment says
    assert flows.decide(transfer(300, tallies={"transferred": 800})).verdict is Verdict.REJECT
    day = ToolCall(ToolInfo("payments_transfer"), {"amount": 300}, session=SessionInfo("run-1"),
                   usage={"day": UsageInfo(tallies={"transferred": 4800})})
    assert flows.decide(day).verdict is Verdict.REJECT
    mail = ToolCall(ToolInfo("mail_send"), {"to": "c@x"},
                    session=SessionInfo("run-1", tallies={"recipients": 2}, seen={"recipients": ["a@x", "b@x"]}))
    assert flows.decide(mail).verdict is Verdict.REJECT
    again = ToolCall(ToolInfo("mail_send"), {"to": "a@x"}, session=mail.session)
    assert flows.decide(again).verdict is Verdict.ALLOW


def test_cel_input_shows_every_declared_tally(flows):
    call = ToolCall(ToolInfo("x"), session=SessionInfo("r", tallies={"recipients": 3, "gone": 1.0}),
                    usage={"day": UsageInfo()})
    base = flows.cel_input(call)
    assert base["session"]["tallies"] == {"transferred": 0.0, "recipients": 3}
    assert base["session"]["seen"] == {"recipients": []}
    assert base["usage"]["day"]["tallies"] == {"transferred": 0.0, "recipients": 0}
    assert type(base["session"]["tallies"]["transferred"]) is float


def test_tallies_for_a_tool_by_name_and_glob(flows):
    assert [t.id for t in flows.tallies_for("payments_transfer")] == ["transferred"]
    assert [t.id for t in flows.tallies_for("mail_send")] == ["recipients"]
    assert flows.tallies_for("payments_refund") == ()
    assert flows.tallies_for("mail_send") is flows.tallies_for("mail_send")  # cached


def test_tally_change_adds_what_the_final_arguments_give(flows):
    assert flows.tally_change(transfer(600)) == TallyChange({"transferred": 600.0}, {})
    mail = ToolCall(ToolInfo("mail_send"), {"to": "a@x"})
    assert flows.tally_change(mail) == TallyChange({}, {"recipients": ("a@x",)})
    assert flows.tally_change(ToolCall(ToolInfo("other"), {"amount": 5})).empty


def test_a_distinct_list_counts_each_value_once_and_long_ones_are_hashed(check):
    policy_set, _, _ = check(tally("people", "distinct", "args.to", '["mail_*"]'))
    assert policy_set is not None
    long = "x" * (MAX_SEEN_VALUE_CHARS + 1)
    change = policy_set.tally_change(ToolCall(ToolInfo("mail_send"), {"to": ["a", "b", "a", long]}))
    values = change.distinct["people"]
    assert values[:2] == ("a", "b") and len(values) == 3 and values[2].startswith("sha256:")
    assert Tallies().added(change).values == {"people": 3}
    assert policy_set.tally_change(ToolCall(ToolInfo("mail_send"), {"to": []})).distinct == {"people": ()}


@pytest.mark.parametrize("amount", [-1, -0.5, math.inf, -math.inf, math.nan, True, "12", None, [1], {"a": 1}])
def test_a_sum_refuses_what_is_not_a_finite_number_at_least_zero(check, amount):
    policy_set, _, _ = check(tally("spent", "sum", "args.amount", "[pay]"))
    assert policy_set is not None
    with pytest.raises(CelEvaluationError) as caught:
        policy_set.tally_change(ToolCall(ToolInfo("pay"), {"amount": amount}))
    assert isinstance(caught.value, TallyError) and caught.value.tally == "spent"
    assert "spent" in str(caught.value)


def test_a_sum_of_zero_and_of_a_large_int_count(check):
    policy_set, _, _ = check(tally("spent", "sum", "args.amount", "[pay]"))
    assert policy_set is not None
    assert policy_set.tally_change(ToolCall(ToolInfo("pay"), {"amount": 0})).sums == {"spent": 0.0}
    assert policy_set.tally_change(ToolCall(ToolInfo("pay"), {"amount": 10**12})).sums == {"spent": 1e12}


@pytest.mark.parametrize("to", [1, None, ["a", 2], {"a": "b"}, True])
def test_a_distinct_tally_refuses_what_is_not_strings(check, to):
    policy_set, _, _ = check(tally("people", "distinct", "args.to", "[m]"))
    assert policy_set is not None
    with pytest.raises(TallyError, match="people"):
        policy_set.tally_change(ToolCall(ToolInfo("m"), {"to": to}))


def test_a_tally_whose_expression_fails_names_the_tally(flows):
    with pytest.raises(TallyError, match="transferred") as caught:
        flows.tally_change(ToolCall(ToolInfo("payments_transfer"), {}))  # no amount
    assert caught.value.tally == "transferred"


def test_a_tally_that_fails_validation_leaves_the_others_checked_at_their_own_lines(check):
    found = errors(check, "policy: p\ntallies:\n  - id: a\n    tools: [t]\n    summ: '1'\n"
                          "  - id: b\n    tools: [t]\n    sum: '\"x\"'\n"
                          "rules:\n  - id: r\n    action: reject\n    when: 'session.tallies.b > 1.0'\n")
    assert [(d.code, d.line, d.rule) for d in found] == [
        ("unknown-key", 5, "tally p/a"), ("tally-type", 8, "tally p/b")]


def test_tally_change_counts_the_arguments_the_caller_gives_the_final_ones(check):
    policy_set, _, _ = check(tally("spent", "sum", "double(args.amount)", "[pay]") + (
        "rules:\n  - id: cap\n    tools: [pay]\n    action: rewrite\n"
        "    rewrite: {set: {amount: 'args.amount > 100 ? 100 : args.amount'}}\n"))
    assert policy_set is not None
    asked = ToolCall(ToolInfo("pay"), {"amount": 700})
    decision = policy_set.decide(asked)
    assert decision.args == {"amount": 100}
    assert policy_set.tally_change(dataclasses.replace(asked, args=decision.args)).sums == {"spent": 100.0}
    assert policy_set.tally_change(asked).sums == {"spent": 700.0}  # the caller chooses: it must give the final
