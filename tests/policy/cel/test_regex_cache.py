"""``matches()`` over cached RE2 patterns (issue 12): the C++ engine checks an expression as written
and binds the ``matches`` calls of its checked tree to a hidden function, so both engines must
still give the same answers, the same errors at the same positions, and leave strings and fields
that say "matches" alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.errors import CelCompileError, CelEvaluationError
from gateway.policy.cel import ExprType, checked, get_engine
from gateway.policy.cel.base import Engine
from gateway.policy.cel.regex import HIDDEN, cached_regex

pytestmark = pytest.mark.both_engines  # both engines answer alike

DATA: dict[str, Any] = {"args": {"text": "my PASSWORD is AKIAABCDEFGHIJKLMNOP", "pattern": "^my",
                                 "matches": "a field", "p": "x.matches(y)"}}

ANSWERS = [
    ('args.text.matches("(?i)password|AKIA[0-9A-Z]{16}")', True),
    ('matches(args.text, "AKIA[0-9A-Z]{16}$")', True),
    ('args.text.matches("^PASSWORD")', False),  # unanchored unless anchored
    ('args.text.matches(args.pattern)', True),  # a pattern only known at run time
    ('args.text.matches  ("word")', False),  # case-sensitive; space before the parenthesis
    ('args.matches == "a field"', True),  # a field named matches is not a call
    ('"x.matches(y)" == args.p && r"matches(" == "matches("', True),  # nor is text in a string
    ("'''a \"matches(\" b'''.matches('matches[(]')", True),
    ('[args.text].exists(t, t.matches("AKIA"))', True),
]


@pytest.fixture(params=("cel-expr-python", "cel-python"))
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.mark.parametrize(("source", "expected"), ANSWERS)
def test_both_engines_answer_alike(engine: Engine, source: str, expected: bool) -> None:
    program = engine.compile(source, ExprType.BOOL)
    assert program.evaluate(engine.activation(DATA)) is expected


@pytest.mark.parametrize(("source", "column"), [
    ("args.text.matches(1)", 18),
    ("'a' + 1 == args.text.matches('x')", 5),
    ("args.text.matches('x') && nope", 27),
])
def test_compile_errors_name_matches_at_the_author_s_position(engine: Engine, source: str, column: int) -> None:
    with pytest.raises(CelCompileError) as caught:
        engine.compile(source, ExprType.BOOL)
    assert (caught.value.line, caught.value.column) == (1, column)
    assert HIDDEN not in str(caught.value)


def test_an_invalid_pattern_fails_the_evaluation_with_the_same_message(engine: Engine) -> None:
    program = engine.compile("args.text.matches('(')", ExprType.BOOL)
    with pytest.raises(CelEvaluationError, match="invalid regular expression: missing \\)") as caught:
        program.evaluate(engine.activation(DATA))
    assert HIDDEN not in str(caught.value)


def test_the_hidden_name_is_not_the_author_s_to_use(engine: Engine) -> None:
    with pytest.raises(CelCompileError) as caught:
        engine.compile(f'{HIDDEN}("a", "a")', ExprType.BOOL)
    assert caught.value.code == "cel-undeclared"


def test_a_constant_pattern_is_compiled_once() -> None:
    engine = get_engine("cel-expr-python")
    program = engine.compile('args.text.matches("PASS(WORD)?")', ExprType.BOOL)
    cached_regex.cache_clear()
    for _ in range(5):
        assert program.evaluate(engine.activation(DATA)) is True
    info = cached_regex.cache_info()
    assert (info.misses, info.hits) == (1, 4)


def test_only_calls_are_bound_in_the_checked_tree_and_the_source_stays_as_written() -> None:
    engine = get_engine("cel-expr-python")
    program = engine.compile('args.p.matches("b") || matches(args.p, "matches[(]") || args.matches == "x"',
                             ExprType.BOOL)
    tree = checked.Checked(program.tree)  # type: ignore[attr-defined]
    assert sorted(name for name in checked.calls(tree.expr) if "re2" in name or "matches" in name) == [HIDDEN] * 2
    fields = [checked.selection(node, "args") for node in checked.nodes(tree.expr)]
    assert "matches" in fields  # the field named matches is still read as a field
    assert program.evaluate(engine.activation(DATA)) is True
