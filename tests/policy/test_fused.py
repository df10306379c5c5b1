"""A call's conditions listed as one program (gateway/policy/fused.py): the same decisions, rule results, labels
and tally changes as evaluating each rule and tally on its own, whatever fails; and the list is really made on
the default engine (else these comparisons would compare the slow path with itself)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

from gateway.policy import PolicySet, check_policies
from gateway.policy.call import SessionInfo, ToolCall, ToolInfo
from gateway.policy.cel import checked
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.evaluate import evaluate_call
from gateway.policy.fused import fuse
from gateway.policy.tallies import TallyError

pytestmark = pytest.mark.both_engines

# Every kind of validate-phase rule the list must agree with: a rewrite first (the list reads the rewritten
# arguments), a joined when/message, a static message, a label, a skip with a computed result, a rule reading a
# file variable that is bound (not written in), one that fails on some calls, one whose dynamic `when` is not
# always a bool, and a rule without `when`.
POLICY = """\
policy: p
variables:
  - name: limit
    expression: 'has(args.limit) ? args.limit : 100'
tallies:
  - id: moved
    tools: [t]
    sum: 'double(args.n)'
  - id: to
    tools: [t]
    distinct: 'has(args.to) ? args.to : "nobody"'
rules:
  - id: tag
    tools: [t]
    action: rewrite
    rewrite: {set: {tag: '"x-" + string(args.n)'}}
  - id: too-many
    tools: [t]
    when: 'args.tag == "x-" + string(args.n) && args.n > 5 && args.n < 50'
    action: reject
    messageExpression: '"too many: " + string(args.n)'
  - id: big
    tools: [t]
    when: 'args.n >= 200'
    action: approve
    message: Big ones need a person.
  - id: seen-untrusted
    tools: [t]
    when: '"untrusted" in session.labels'
    action: label
    labels: [tainted]
  - id: skip-zero
    tools: [t]
    when: 'args.n == 0'
    action: skip
    resultExpression: '{"skipped": args.tag}'
  - id: over-limit
    tools: [t]
    when: 'variables["limit"] < args.n'
    action: reject
    message: Over the limit.
  - id: needs-key
    tools: [t]
    when: 'args.key > 3'
    action: reject
    on_error: ignore
  - id: flag
    tools: [t]
    when: 'args.flag'
    action: reject
    message: Flagged.
  - id: always
    tools: [t]
    action: allow
"""

CALLS = [dict(zip(("n", "key", "flag", "to", "limit"), values, strict=True)) for values in itertools.product(
    (0, 1, 10, 200, -3.5), (None, 1, 9), (False, True, "yes", None), (None, "a@x", ["a@x", "b@x"]), (None, 5))]


def _call(args: dict[str, Any], labels: list[str]) -> ToolCall:
    present = {k: v for k, v in args.items() if v is not None}
    return ToolCall(ToolInfo("t"), present, session=SessionInfo("run-1", labels=labels))


def _plain(decision: Decision) -> dict[str, Any]:
    shown = decision.to_dict()
    shown.pop("elapsed_us")
    for rule in shown["rules"]:
        rule.pop("elapsed_us", None)
    return shown


@pytest.fixture
def policy_set(tmp_path: Path, engine: str) -> PolicySet:
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    loaded, diagnostics = check_policies([tmp_path], engine)
    assert loaded is not None, [d.format() for d in diagnostics]
    return loaded


def test_the_list_is_made_on_the_default_engine_and_not_on_celpy(policy_set, engine):
    call = _call({"n": 1}, [])
    fused = fuse(policy_set.engine, policy_set.matched(call).request, policy_set.tallies_for("t"))
    if engine == "cel-python":
        assert fused is None
        return
    assert fused is not None
    # one value per listed rule (not the rewrite, not the rule reading a bound variable, not the one without
    # `when`) and one per tally
    assert fused.size == 6 + 2 and fused.tallies == 2
    assert [s >= 0 for s in fused.slots] == [False, True, True, True, True, False, True, True, False]


@pytest.mark.parametrize("labels", [[], ["untrusted"]])
def test_listed_decisions_are_the_ones_each_rule_on_its_own_gives(policy_set, engine, labels):
    listed = 0
    for args in CALLS:
        call = _call(args, labels)
        matched = policy_set.matched(call)
        alone = evaluate_call(policy_set.engine, policy_set.policies, matched.request, Stage.REQUEST,
                              policy_set.cel_input(call, matched.request_reads), policy_set.default, "t",
                              policy_set.revision)
        assert _plain(policy_set.decide(call)) == _plain(alone), args
        fused = fuse(policy_set.engine, matched.request)
        if fused is not None:
            rewritten = {**policy_set.cel_input(call, matched.request_reads), "args": alone.args}
            listed += fused.values(policy_set.engine.activation(rewritten)) is not None
    # on the default engine most calls were decided from the list, the rest (a rule failed) one by one
    assert listed > len(CALLS) // 3 if engine == "cel-expr-python" else listed == 0


def test_a_counted_call_counts_what_deciding_then_counting_gives(policy_set):
    counts = frozenset({Verdict.ALLOW, Verdict.APPROVE})
    seen_errors = seen_changes = 0
    for args in CALLS:
        call = _call(args, [])
        decision, change = policy_set.decide_counted(call, counts)
        assert _plain(decision) == _plain(policy_set.decide(call)), args
        if decision.verdict not in counts:
            assert change is None, args  # a refused call is not counted, and its tally is not asked
            continue
        try:
            expected: Any = policy_set.tally_change(dataclasses.replace(call, args=decision.args))
        except TallyError as exc:
            expected = exc
        if isinstance(expected, TallyError):
            seen_errors += 1
            assert isinstance(change, TallyError) and (change.tally, str(change)) == (expected.tally, str(expected))
        else:
            seen_changes += 1
            assert change == expected, args
    # both sides were met: negative amounts fail closed, the rest count
    assert seen_errors and seen_changes


def test_listed_trees_keep_every_node_id_unique(policy_set, engine):
    if engine == "cel-python":
        pytest.skip("the pure engine lists nothing")
    rules = policy_set.matched(_call({"n": 1}, [])).request
    trees = [checked.Checked(r.when.program.tree) for r in rules if r.when is not None and not r.variables_needed]
    listed = checked.listed(trees)
    ids = [next(value for number, _, value in node if number == 2) for node in checked.nodes(listed.expr)]
    assert len(ids) == len(set(ids)) and len(ids) > len(trees)
