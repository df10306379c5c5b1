"""The CEL front end (``gateway/policy/cel/syntax.py``): each expression is parsed once, however many
readers (compile's typed check, the catalog checks, explain's clauses) look at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.core.errors import CelCompileError
from gateway.policy.catalog_checks import check_documents
from gateway.policy.cel import syntax
from gateway.policy.cel.syntax import flatten, parse, references
from gateway.policy.clauses import split_when
from gateway.policy.load import load_policy_set, read_document

POLICY = """\
policy: once
variables:
  - name: big
    expression: "args.amount > 100"
rules:
  - id: big-refund
    action: reject
    tools: [refund]
    when: "variables.big && principal.id != 'admin' || args.reason == 'x && y'"
    messageExpression: "'refund of ' + string(args.amount) + ' refused'"
  - id: audit
    action: allow
    when: "tool.name.startsWith('get')"
"""
SOURCES = {"args.amount > 100", "variables.big && principal.id != 'admin' || args.reason == 'x && y'",
           "'refund of ' + string(args.amount) + ' refused'", "tool.name.startsWith('get')"}


class _Counting:
    """The Lark parser behind ``syntax.parse``, counting the sources it is given."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.sources: list[str] = []

    def parse(self, source: str) -> object:
        self.sources.append(source)
        return self.real.parse(source)  # type: ignore[attr-defined]


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Counting]:
    counter = _Counting(syntax.parser())
    monkeypatch.setattr(syntax, "parser", lambda: counter)
    parse.cache_clear()
    yield counter
    parse.cache_clear()


def test_loading_and_the_catalog_checks_parse_each_expression_once(tmp_path: Path, counting: _Counting) -> None:
    path = tmp_path / "once.yaml"
    path.write_text(POLICY)
    policy_set = load_policy_set([path], engine="cel-expr-python")
    doc = read_document(path)[0]
    assert doc is not None
    check_documents([doc], None, policy_set.engine)
    assert sorted(counting.sources) == sorted(SOURCES)


def test_explain_splits_the_tree_loading_parsed(tmp_path: Path, counting: _Counting) -> None:
    path = tmp_path / "once.yaml"
    path.write_text(POLICY)
    policy_set = load_policy_set([path], engine="cel-expr-python")
    when = policy_set.rules[0].when
    assert when is not None
    before = counting.sources.count(when.source)
    clauses = split_when(when.source, policy_set.engine)
    assert clauses is not None and clauses.operator == "||"
    assert [c.source for c in clauses.parts] == ["variables.big && principal.id != 'admin'", "args.reason == 'x && y'"]
    assert counting.sources.count(when.source) == before == 1


def test_the_walks_read_strings_and_macro_variables_as_what_they_are() -> None:
    tree = parse("args.x == 'args.y' && [1].all(args, args > 0) && args['z'] == 1")
    assert {(r.root, r.name) for r in references(tree)} == {("args", "x"), ("args", "z")}
    split = flatten(tree)
    assert split is not None and split[0] == "&&" and len(split[1]) == 3


def test_a_syntax_error_has_a_position() -> None:
    with pytest.raises(CelCompileError) as caught:
        parse("args.x ==\n  )")
    assert (caught.value.line, caught.value.column) == (2, 3)
