"""The default engine: Google's C++ CEL through ``cel-expr-python``.

Expressions are parsed and type-checked at compile time against the declared variables, so an
undeclared name or a statically wrong result type is a load error here.

An expression is compiled as written, in an environment of the standard library, the strings
extension and the gateway's functions. What runs may differ from it only in its checked tree
(``checked.py``), planned again by ``Env.deserialize`` in a second environment that also declares
the cached-RE2 ``matches`` (``regex.py``): its ``matches`` calls bound to that function, file
variables written in, ``when`` joined with its message. An activation holds only values, so one
built from either environment serves programs of both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

from gateway.core.errors import CelCompileError, CelEvaluationError
from gateway.core.limits import MAX_FUSED_NODES, MAX_INLINED_NODES
from gateway.policy.cel import checked
from gateway.policy.cel.base import VARIABLES, ExprType, Program
from gateway.policy.cel.functions import FUNCTIONS, RECEIVER_FUNCTIONS
from gateway.policy.cel.regex import HIDDEN, matches, restore_name

__all__ = ["CppEngine"]

_DYN_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
_KINDS = {"string": cel.Type.STRING, "bool": cel.Type.BOOL, "map": _DYN_MAP, "list": cel.Type.List(cel.Type.STRING)}
_EXPECTED = {ExprType.BOOL: cel.Type.BOOL, ExprType.STRING: cel.Type.STRING}
_ERROR = cel.Type.ERROR

# "ERROR: <input>:1:4: Syntax error: ..." — the checker's position inside the expression.
_POSITION = re.compile(r"<input>:(\d+):(\d+): (.*)")
# "NOT_FOUND: Key not found ..." — absl status codes prefixed to runtime errors.
_STATUS = re.compile(r"^[A-Z_]+: ")


def _declarations() -> list[Any]:
    decls = []
    for name, (impl, params, result) in FUNCTIONS.items():
        kinds = [_KINDS[p] for p in params]
        overloads = [cel.Overload(f"gateway_{name}", _KINDS[result], kinds, impl=impl)]
        if name in RECEIVER_FUNCTIONS:
            overloads.append(cel.Overload(f"gateway_{name}_member", _KINDS[result], kinds, is_member=True, impl=impl))
        decls.append(cel.FunctionDecl(name, overloads))
    return decls


def _regex_declaration() -> Any:
    # matches() over cached patterns (regex.py), both forms, as the standard library's; the engine
    # will not let a second matches(string, string) be registered, so it has a name of its own
    return cel.FunctionDecl(HIDDEN, [
        cel.Overload(f"gateway_{HIDDEN}", cel.Type.BOOL, [cel.Type.STRING, cel.Type.STRING], impl=matches),
        cel.Overload(f"gateway_{HIDDEN}_string", cel.Type.BOOL, [cel.Type.STRING, cel.Type.STRING], is_member=True,
                     impl=matches),
    ])


class _Program:
    __slots__ = ("_expr", "tree")

    def __init__(self, expr: Any, tree: bytes) -> None:
        self._expr = expr
        self.tree = tree  # the checked expression it runs, serialized

    def evaluate(self, activation: Any) -> Any:
        try:
            value = self._expr.eval(activation)
        except Exception as exc:  # the binding raises for values it cannot convert
            raise CelEvaluationError(restore_name(_STATUS.sub("", str(exc)).strip('"'))) from exc
        plain = value.plain_value()
        kind = type(plain)
        if kind is bool:  # most expressions are conditions: the one check they need
            return plain
        # an error's plain value is its message; asking for the type costs, so only then
        if kind is str and value.type() == _ERROR:
            raise CelEvaluationError(restore_name(_STATUS.sub("", plain)))
        # bytes come back as bytearray; everything else is already plain
        return bytes(plain) if kind is bytearray else plain


class CppEngine:
    """CEL via the C++ implementation."""

    name = "cel-expr-python"

    def __init__(self, variables: Sequence[str] = VARIABLES) -> None:
        """``variables``: the names expressions may read (a policy's by default; identity mappings read others)."""
        declared = {name: _DYN_MAP for name in variables}
        self._env = cel.NewEnv(variables=declared, extensions=[ext_strings.ExtStrings()],
                               functions=_declarations())
        self._runs = cel.NewEnv(variables=declared, extensions=[ext_strings.ExtStrings()],
                                functions=[*_declarations(), _regex_declaration()])

    def compile(self, source: str, expected: ExprType) -> _Program:
        try:
            expr = self._env.compile(source)
        except Exception as exc:
            raise _compile_error(str(exc)) from None
        want = _EXPECTED.get(expected)
        got = expr.return_type()
        if want is not None and got != want and got != cel.Type.DYN:
            raise CelCompileError(
                f"expression must evaluate to {expected}, but it is {got.name().lower()}",
                kind="cel-type",
            )
        tree = expr.serialize()
        if b"matches" in tree:  # only a tree naming it can call it; the tree says whether one does
            found = checked.Checked(tree)
            if checked.rename_calls(found, {"matches": HIDDEN}):
                return self._planned(found)
        return _Program(expr, tree)

    def _planned(self, tree: checked.Checked) -> _Program:
        serialized = tree.serialize()
        return _Program(self._runs.deserialize(serialized), serialized)

    def inline(self, program: Program, variables: Mapping[str, Program]) -> _Program | None:
        """``program`` with the checked trees of the file variables it reads written in (see ``Engine``)."""
        assert isinstance(program, _Program)
        host = checked.Checked(program.tree)

        def tree_of(name: str) -> checked.Checked | None:
            value = variables.get(name)
            return checked.Checked(value.tree) if isinstance(value, _Program) else None

        if not checked.inline(host, "variables", tree_of) or checked.size(host) > MAX_INLINED_NODES:
            return None
        return self._planned(host)

    def join(self, when: Program, message: Program) -> _Program | None:
        """``when ? [message] : []`` from the two checked trees (see ``Engine``)."""
        assert isinstance(when, _Program) and isinstance(message, _Program)
        # each side is bounded already (as written, or by MAX_INLINED_NODES): the two stay bounded
        return self._planned(checked.conditional(checked.Checked(when.tree), checked.Checked(message.tree)))

    def fuse(self, programs: Sequence[Program]) -> _Program | None:
        """``[p1, p2, ...]`` from the checked trees (see ``Engine``)."""
        assert all(isinstance(p, _Program) for p in programs)
        trees = [checked.Checked(p.tree) for p in programs]  # type: ignore[attr-defined]
        if sum(checked.size(t) for t in trees) > MAX_FUSED_NODES:
            return None
        return self._planned(checked.listed(trees))

    def activation(self, data: Mapping[str, Any]) -> Any:
        try:
            return self._env.Activation(data)
        except Exception as exc:
            raise CelEvaluationError(f"input cannot be given to CEL: {exc}") from exc


def _compile_error(text: str) -> CelCompileError:
    match = _POSITION.search(text)
    if not match:
        return CelCompileError(_STATUS.sub("", text).strip())
    line, column, message = int(match.group(1)), int(match.group(2)), match.group(3)
    message = message.split("\n", 1)[0].strip()
    kind = "cel-undeclared" if "undeclared reference" in message else "cel-compile"
    if kind == "cel-undeclared":
        message = re.sub(r"\s*\(in container ''\)", "", message)
    return CelCompileError(message, line, column, kind=kind)
