"""Tallies: compiled once at load (typed against their tools' rule environment), evaluated per admitted call.

A tally's expression reads what a rule matching its ``tools:`` reads, except ``variables`` (a tally belongs to
the set, not to a file's rules) and ``result`` (a call is counted when it is admitted, before it runs). What it
gives is checked again at run time and a bad value fails closed: a sum takes finite numbers >= 0 only (a
negative amount must never lower a running total), a distinct tally strings or lists of strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from gateway.core.errors import CelEvaluationError
from gateway.core.globs import glob_match, glob_problem, is_glob
from gateway.core.limits import MAX_INDEXED_TOOL_NAMES
from gateway.core.sourcemap import Path, YamlDocument
from gateway.policy.cel import VARIABLES, Engine, ExprType
from gateway.policy.cel.types import DYN, ObjectType, fmt_type
from gateway.policy.compiled import CompiledTally, Expression
from gateway.policy.flow import TallyChange, seen_value
from gateway.policy.model import PolicyFile, TallySpec
from gateway.policy.typed_env import TypeEnvironment

__all__ = ["TALLY_VARIABLES", "TallyError", "TallyIndex", "compile_tallies", "tally_change", "tally_change_of",
           "tally_change_on", "tally_rule_id"]

# What a tally expression may read.
TALLY_VARIABLES = tuple(v for v in VARIABLES if v not in ("variables", "result"))
_SUM_TYPES = frozenset({"int", "uint", "double", DYN})
_DISTINCT_TYPES = frozenset({"string", DYN, ("list", "string"), ("list", DYN)})


class TallyError(CelEvaluationError):
    """A tally's expression failed or gave a value it may not count; ``tally`` names it."""

    def __init__(self, tally: str, message: str) -> None:
        super().__init__(message)
        self.tally = tally


class ExpressionCompiler(Protocol):
    """What compiling a tally needs of the file's compiler (``compile.py``)."""

    doc: YamlDocument

    def error(self, path: Path, code: str, message: str, rule: str | None, hint: str | None = None,
              *, key: bool = False) -> None:
        """Report an error at ``path`` of the document."""
        ...

    def expression(self, source: str, expected: ExprType, path: Path, rule: str | None, env: dict[str, Any],
                   proven: frozenset[str] = frozenset(), variables: Sequence[str] = VARIABLES) -> Expression | None:
        """Compile and type ``source``; None after an error."""
        ...


def tally_rule_id(policy: str, tally: str) -> str:
    """How a diagnostic names a tally (in place of a rule id)."""
    return f"tally {policy}/{tally}"


def compile_tallies(c: ExpressionCompiler, spec: PolicyFile, types: TypeEnvironment,
                    indices: Sequence[int] | None = None) -> list[CompiledTally]:
    """The file's tallies that compile; every problem reported through ``c`` at its position."""
    out = []
    for i, tally in zip(indices if indices is not None else range(len(spec.tallies)), spec.tallies, strict=True):
        compiled = _compile(c, spec.policy, tally, ("tallies", i), types)
        if compiled is not None:
            out.append(compiled)
    return out


def _compile(c: ExpressionCompiler, policy: str, tally: TallySpec, path: Path,
             types: TypeEnvironment) -> CompiledTally | None:
    name = tally_rule_id(policy, tally.id)
    ok = True
    if not tally.tools:
        ok = False
        c.error((*path, "tools"), "invalid-value", "'tools' is empty, so the tally counts nothing", name,
                "list the tools whose calls it counts (names or globs)")
    for index, pattern in enumerate(tally.tools):
        problem = glob_problem(pattern)
        if problem is not None:
            ok = False
            c.error((*path, "tools", index), "invalid-value", problem, name,
                    "fix the [...] set: a range runs from the lower character to the higher")
    if (tally.sum is None) == (tally.distinct is None):
        where = (*path, "distinct") if tally.sum is not None else path
        c.error(where, "tally-kind", "a tally has exactly one of 'sum' and 'distinct'", name,
                "sum: a number to add up (double(args.amount)), or distinct: a string to count once (args.to)",
                key=tally.sum is not None)
        return None
    kind = "sum" if tally.sum is not None else "distinct"
    source = tally.sum if tally.sum is not None else tally.distinct
    assert source is not None
    env = {k: v for k, v in types.for_rule(tally.tools, ObjectType("variables", {})).items()
           if k in TALLY_VARIABLES}
    expr = c.expression(source, ExprType.ANY, (*path, kind), name, env, variables=TALLY_VARIABLES)
    if expr is None:
        return None
    wanted = _SUM_TYPES if kind == "sum" else _DISTINCT_TYPES
    if expr.type not in wanted:
        hint = ("convert it: double(...) of a number, e.g. double(args.amount)" if kind == "sum"
                else "give a string, e.g. args.to, or string(...) of a value, or a list of strings")
        c.error((*path, kind), "tally-type", f"a {kind} tally's expression must give "
                f"{'a number (int, uint or double)' if kind == 'sum' else 'a string or a list of strings'}, "
                f"but {source!r} is {fmt_type(expr.type)}", name, hint)
        return None
    if not ok:
        return None
    pos = c.doc.position(path)
    return CompiledTally(tally.id, policy, kind, tuple(tally.tools), expr, c.doc.file, pos.line, pos.column,
                         tally.description)


class TallyIndex:
    """Tool name → the tallies that count its calls (with the CEL inputs they read), with a bounded cache."""

    def __init__(self, tallies: Sequence[CompiledTally]) -> None:
        self._tallies = tuple(tallies)
        self._cache: dict[str, tuple[tuple[CompiledTally, ...], frozenset[str]]] = {}

    def lookup(self, tool: str) -> tuple[tuple[CompiledTally, ...], frozenset[str]]:
        """The tallies for ``tool``, in load order, and the CEL variables they read."""
        found = self._cache.get(tool)
        if found is None:
            if len(self._cache) >= MAX_INDEXED_TOOL_NAMES:
                self._cache.clear()
            chosen = tuple(t for t in self._tallies if _matches(tool, t.tools))
            reads = frozenset().union(*(t.expression.references for t in chosen))
            found = self._cache[tool] = (chosen, reads)
        return found


def _matches(tool: str, patterns: Sequence[str]) -> bool:
    return any(glob_match(tool, p) if is_glob(p) else tool == p for p in patterns)


def tally_change(engine: Engine, tallies: Sequence[CompiledTally], base: dict[str, Any]) -> TallyChange:
    """What one admitted call adds to ``tallies``, from the CEL inputs ``base``; ``TallyError`` on a bad value."""
    if not tallies:
        return TallyChange()
    return tally_change_on(engine.activation(base), tallies)


def tally_change_on(activation: Any, tallies: Sequence[CompiledTally]) -> TallyChange:
    """``tally_change`` on an activation already made (the decision's own, when it is the same call)."""
    values = []
    for tally in tallies:
        try:
            values.append(tally.expression.program.evaluate(activation))
        except CelEvaluationError as exc:
            raise TallyError(tally.id, f"tally {tally.id} ({tally.policy}): {exc}") from exc
        except RecursionError as exc:  # absurdly deep input
            raise TallyError(tally.id, f"tally {tally.id} ({tally.policy}): the input is too deep") from exc
    return tally_change_of(tallies, values)


def tally_change_of(tallies: Sequence[CompiledTally], values: Sequence[Any]) -> TallyChange:
    """What ``tallies`` add given the values their expressions gave (in order), each checked as it is counted."""
    sums: dict[str, float] = {}
    distinct: dict[str, tuple[str, ...]] = {}
    for tally, value in zip(tallies, values, strict=True):
        if tally.kind == "sum":  # a double in range needs no more (the usual case: per call, kept cheap)
            sums[tally.id] = value if type(value) is float and 0.0 <= value < math.inf else _amount(tally, value)
        else:
            distinct[tally.id] = _values(tally, value)
    return TallyChange(sums, distinct)


def _amount(tally: CompiledTally, value: Any) -> float:
    """A sum's value: a finite number >= 0 (bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TallyError(tally.id, f"tally {tally.id} ({tally.policy}): a sum takes a number, "
                                   f"got {type(value).__name__}")
    try:
        amount = float(value)
    except OverflowError:
        amount = math.inf
    if not math.isfinite(amount) or amount < 0:
        raise TallyError(tally.id, f"tally {tally.id} ({tally.policy}): a sum takes a finite number >= 0, "
                                   f"got {value!r}")
    return amount


def _values(tally: CompiledTally, value: Any) -> tuple[str, ...]:
    """A distinct tally's values: a string, or a list of strings, each as it is kept (``seen_value``)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise TallyError(tally.id, f"tally {tally.id} ({tally.policy}): a distinct tally takes a string or a "
                                   f"list of strings, got {type(value).__name__}")
    return tuple(dict.fromkeys(seen_value(x) for x in items))
