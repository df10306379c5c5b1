"""The default engine: Google's C++ CEL through ``cel-expr-python``.

Expressions are parsed and type-checked at compile time against the declared variables, so an
undeclared name or a statically wrong result type is a load error here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

from gateway.core.errors import CelCompileError, CelEvaluationError
from gateway.policy.cel.base import VARIABLES, ExprType
from gateway.policy.cel.functions import FUNCTIONS
from gateway.policy.cel.regex import HIDDEN, matches, rename_matches, restore_name

__all__ = ["CppEngine"]

_DYN_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
_KINDS = {"string": cel.Type.STRING, "bool": cel.Type.BOOL, "map": _DYN_MAP}
_EXPECTED = {ExprType.BOOL: cel.Type.BOOL, ExprType.STRING: cel.Type.STRING}
_ERROR = cel.Type.ERROR

# "ERROR: <input>:1:4: Syntax error: ..." — the checker's position inside the expression.
_POSITION = re.compile(r"<input>:(\d+):(\d+): (.*)")
# "NOT_FOUND: Key not found ..." — absl status codes prefixed to runtime errors.
_STATUS = re.compile(r"^[A-Z_]+: ")


def _declarations() -> list[Any]:
    decls = []
    for name, (impl, params, result) in FUNCTIONS.items():
        overload = cel.Overload(
            f"gateway_{name}", _KINDS[result], [_KINDS[p] for p in params], impl=impl
        )
        decls.append(cel.FunctionDecl(name, [overload]))
    # matches() under another name, over cached patterns (regex.py): both forms, as the standard library's
    decls.append(cel.FunctionDecl(HIDDEN, [
        cel.Overload(f"gateway_{HIDDEN}", cel.Type.BOOL, [cel.Type.STRING, cel.Type.STRING], impl=matches),
        cel.Overload(f"gateway_{HIDDEN}_string", cel.Type.BOOL, [cel.Type.STRING, cel.Type.STRING], is_member=True,
                     impl=matches),
    ]))
    return decls


class _Program:
    __slots__ = ("_expr",)

    def __init__(self, expr: Any) -> None:
        self._expr = expr

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
        self._env = cel.NewEnv(
            variables={name: _DYN_MAP for name in variables},
            extensions=[ext_strings.ExtStrings()],
            functions=_declarations(),
        )

    def compile(self, source: str, expected: ExprType) -> _Program:
        renamed = rename_matches(source)
        if renamed is None:  # not a name the author may use: as undeclared as on the other engine
            raise CelCompileError(f"undeclared reference to '{HIDDEN}'", kind="cel-undeclared")
        try:
            expr = self._env.compile(renamed)
        except Exception as exc:
            raise _compile_error(restore_name(str(exc))) from None
        want = _EXPECTED.get(expected)
        got = expr.return_type()
        if want is not None and got != want and got != cel.Type.DYN:
            raise CelCompileError(
                f"expression must evaluate to {expected}, but it is {got.name().lower()}",
                kind="cel-type",
            )
        return _Program(expr)

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
