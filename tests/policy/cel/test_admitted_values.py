"""A value the gateway admits is seen by both CEL engines exactly as the tool receives it.

``gateway.core.values.problem`` (Profile.POLICY) is the gate at the start of every call. This pins what
it must catch: for any JSON-like value, either the gate names a problem, or the engine hands back
an equal value (same types, same strings to the last character). cel-expr-python cuts strings at
U+0000 and fails on lone surrogates; neither engine takes integers outside int64.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import CelEvaluationError
from gateway.core.values import Profile, problem
from gateway.policy.cel import ExprType, get_engine

# Characters that stress the engines: NUL, a lone surrogate of each half, controls, a BOM,
# line separators, astral characters; plus ordinary text.
TRICKY = st.sampled_from(["\x00", "\ud800", "\udfff", "\x01", "\x7f", "\ufeff", "\u2028", "\U0010ffff", "\ufffe",
                          "é", "a", "/", "@"])
TEXT = st.lists(st.one_of(TRICKY, st.characters()), max_size=8).map("".join)
NUMBERS = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([2**63 - 1, 2**63, -(2**63),
                                                                                     -(2**63) - 1, 2**64 - 1]),
                    st.floats(allow_nan=True, allow_infinity=True))
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(TEXT, inner, max_size=3)), max_leaves=12)

ENGINES = ("cel-expr-python", "cel-python")
SETTINGS = settings(max_examples=150, deadline=None, database=None)


def _same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@pytest.mark.parametrize("name", ENGINES)
@given(value=VALUES)
@SETTINGS
def test_an_admitted_value_reaches_the_policy_unchanged(name: str, value: Any) -> None:
    if problem({"v": value}, Profile.POLICY) is not None:
        return  # refused at the door: the policy never sees it
    engine = get_engine(name)
    program = engine.compile("args.v", ExprType.ANY)
    try:
        seen = program.evaluate(engine.activation({"args": {"v": value}}))
    except CelEvaluationError as exc:
        pytest.fail(f"{name} could not take an admitted value {value!r}: {exc}")
    assert _same(seen, value), f"{name} saw {seen!r} for {value!r}"


@pytest.mark.parametrize("value", ["http://example.com\x00@10.0.0.1/", "a\ud800", 2**63, -(2**63) - 1,
                                   float("nan"), float("inf"), {"k\x00": 1}])
def test_values_an_engine_would_misread_are_refused(value: Any) -> None:
    assert problem({"v": value}, Profile.POLICY) is not None

