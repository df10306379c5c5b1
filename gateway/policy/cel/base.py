"""The seam between the policy engine and a CEL implementation.

An engine compiles an expression once, at load time, against the declared variables and the
gateway's functions, and gives back a program; a request only builds an activation and evaluates
programs against it. Programs are combined (a file variable written into a rule, ``when`` joined
with its message) on the engine's own tree, never by editing source text. Both engines return
plain Python values (None, bool, int, float, str, bytes, list, dict), so nothing above this seam
knows which engine ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

__all__ = ["VARIABLES", "Engine", "ExprType", "Program", "check_result_type"]

# Every name an expression may read. All are maps from string to dynamic values, because tool
# arguments and results are JSON; an undeclared name is a compile error on both engines.
VARIABLES: tuple[str, ...] = (
    "tool",
    "args",
    "original_args",
    "principal",
    "session",
    "usage",
    "call",
    "env",
    "variables",
    "result",
    "request",
    "resource",
    "prompt",
)


class ExprType(StrEnum):
    """What an expression must evaluate to."""

    BOOL = "bool"
    STRING = "string"
    ANY = "any"


class Program(Protocol):
    """One compiled expression."""

    def evaluate(self, activation: Any) -> Any:
        """Evaluate against an activation; plain Python result or ``CelEvaluationError``."""
        ...


class Engine(Protocol):
    """A CEL implementation behind the seam."""

    name: str

    def compile(self, source: str, expected: ExprType) -> Program:
        """Parse and check ``source``; raise ``CelCompileError`` with an in-expression position."""
        ...

    def activation(self, data: Mapping[str, Any]) -> Any:
        """Bind variable values for one evaluation round (reused across many programs)."""
        ...

    def inline(self, program: Program, variables: Mapping[str, Program]) -> Program | None:
        """``program`` with each ``variables.NAME`` it reads replaced by that variable's tree.

        None when that is not a plain substitution: it reads ``variables`` another way
        (``has(variables.x)``, ``variables["x"]``), a variable it reads is not given, a comprehension
        would capture a name, or the result would be larger than ``MAX_INLINED_NODES``.
        """
        ...

    def join(self, when: Program, message: Program) -> Program | None:
        """``when ? [message] : []`` as one program, built from the two trees; None if it is too large."""
        ...

    def fuse(self, programs: Sequence[Program]) -> Program | None:
        """``[p1, p2, ...]`` as one program, built from the trees: one evaluation instead of several (an error
        in any makes the whole one fail: the caller then evaluates them one by one). None when the engine does
        not fuse, or the result would be larger than ``MAX_FUSED_NODES``."""
        ...


_PYTHON_TYPES: dict[ExprType, tuple[type, ...]] = {
    ExprType.BOOL: (bool,),
    ExprType.STRING: (str,),
}


def check_result_type(value: Any, expected: ExprType) -> str | None:
    """Why ``value`` does not have the expected type, or None when it does.

    Expressions over dynamic JSON only have a type at run time; this check is what keeps a
    ``when`` that returns a string from being read as true.
    """
    wanted = _PYTHON_TYPES.get(expected)
    if wanted is None or isinstance(value, wanted):
        return None
    return f"expression must evaluate to {expected}, got {_cel_type_name(value)}"


def _cel_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__
