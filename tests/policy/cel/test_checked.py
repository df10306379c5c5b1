"""Programs are combined on the engines' trees, never on source text (``cel/checked.py`` for the C++
engine, ``syntax.inline_tree`` / ``conditional_tree`` for cel-python).

A file variable written into a rule must mean exactly what binding its value means; where the two
could differ (a comprehension variable that shadows an input, ``has(variables.x)``, a tree that
would grow without bound) the variable is bound instead, and the decision is the same either way.
"""

from __future__ import annotations

import pytest

from gateway.policy import Verdict
from gateway.policy.cel import ExprType, checked, get_engine
from tests.conftest import make_call

pytestmark = pytest.mark.both_engines


def test_a_comprehension_variable_named_like_an_input_does_not_capture_a_written_in_variable(load):
    ps = load("""
        policy: p
        default: allow
        variables:
          - name: big
            expression: args.amount > 100
        rules:
          - id: r
            tools: [pay]
            when: '[1].exists(args, variables.big)'
            action: reject
    """)
    # written in, ``args`` would be the list element 1 here, and the rule would fail (closed)
    assert ps.rules[0].variables_needed == frozenset({"big"})
    assert ps.decide(make_call("pay", {"amount": 5})).verdict is Verdict.ALLOW
    assert ps.decide(make_call("pay", {"amount": 500})).verdict is Verdict.REJECT


def test_has_of_a_variable_is_asked_of_the_bound_values(load):
    ps = load("""
        policy: p
        default: allow
        variables:
          - name: big
            expression: args.amount > 100
        rules:
          - id: r
            tools: [pay]
            when: has(variables.big) && variables.big
            action: reject
            on_error: ignore
    """)
    assert ps.rules[0].variables_needed == frozenset({"big"})
    assert ps.decide(make_call("pay", {"amount": 500})).verdict is Verdict.REJECT
    # the variable fails (no amount): it is not bound, so has() is false and the rule does not fire
    decision = ps.decide(make_call("pay", {}))
    assert decision.verdict is Verdict.ALLOW and decision.rules[0].error is None


def test_a_variable_tree_that_would_grow_geometrically_is_bound_instead(load):
    doubling = "\n".join(f"  - name: v{i}\n    expression: variables.v{i - 1} + variables.v{i - 1}"
                         for i in range(1, 16))
    ps = load(f"""
policy: p
default: allow
variables:
  - name: v0
    expression: args.s
{doubling}
rules:
  - id: r
    tools: [pay]
    when: size(variables.v15) == 65536
    action: reject
""")
    assert ps.rules[0].variables_needed  # past MAX_INLINED_NODES: bound, not written in
    assert ps.decide(make_call("pay", {"s": "ab"})).verdict is Verdict.REJECT
    assert ps.decide(make_call("pay", {"s": "a"})).verdict is Verdict.ALLOW


def test_text_that_spells_a_variable_or_a_call_is_left_as_text(load):
    ps = load("""
        policy: p
        default: allow
        variables:
          - name: big
            expression: args.amount > 100  # a comment that says variables.big and matches(
        rules:
          - id: r
            tools: [pay]
            when: 'variables.big && args.note == "variables.big matches(x)" && args.note.matches("big m")'
            action: reject
            messageExpression: '"variables.big: " + string(args.amount)'
    """)
    assert ps.rules[0].variables_needed == frozenset() and ps.rules[0].when_message is not None
    decision = ps.decide(make_call("pay", {"amount": 500, "note": "variables.big matches(x)"}))
    assert (decision.verdict, decision.message) == (Verdict.REJECT, "variables.big: 500")
    assert ps.decide(make_call("pay", {"amount": 500, "note": "other"})).verdict is Verdict.ALLOW


@pytest.mark.parametrize("source", [
    "args.a.matches('x') && [1, 2].exists(i, i > 1) && {'k': args.a}.k == 'xy'",
    "-9223372036854775808 < args.n && 18446744073709551615u > 0u && 1.5e300 > 0.0 && b'\\xff' != b''",
    "has(args.a) ? args.a : duration('1h') > duration('1m')",
])
def test_the_wire_format_reads_and_writes_back_byte_for_byte(source: str) -> None:
    engine = get_engine("cel-expr-python")
    tree = engine.compile(source, ExprType.ANY).tree  # type: ignore[attr-defined]
    assert checked.encode(checked.decode(tree)) == tree
