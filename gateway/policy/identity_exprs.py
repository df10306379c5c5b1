"""Identity expressions: the CEL that turns a verified token's claims into a principal, checks it, and grants roles.

The model is Kubernetes' structured authentication configuration. Each expression is compiled once,
when the config loads, in a typed environment of its own, and its result type is checked then:

    principal.id       over ``claims`` (the token's payload: a map of dynamic values)   a string
    principal.groups   over ``claims``                                                   a list of strings
    principal.claims   over ``claims``                                                   a map
    rules[]            over ``claims``                                                   a bool
    roles.*            over ``principal`` (typed as policies see it)                     a bool

What only the run time can know (a claim that is absent, or of another type) is checked again on
every value an expression returns (``result_problem``); either failure refuses the token.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from gateway.core.errors import CelCompileError
from gateway.core.limits import MAX_EXPRESSION_CHARS
from gateway.policy.cel import ExprType, Program, get_engine
from gateway.policy.cel.pure_check import CelTypeError, analyse
from gateway.policy.cel.types import DYN, DYN_MAP, compatible, fmt_type
from gateway.policy.typed_env import PRINCIPAL

__all__ = ["CLAIM_VARIABLES", "ROLE_VARIABLES", "Produces", "compile_identity", "result_problem"]

CLAIM_VARIABLES = ("claims",)
ROLE_VARIABLES = ("principal",)


class Produces(StrEnum):
    """What an identity expression must produce."""

    ID = "string"
    GROUPS = "list of strings"
    CLAIMS = "map"
    BOOL = "bool"


_STATIC: dict[Produces, Any] = {Produces.ID: "string", Produces.GROUPS: ("list", "string"),
                                Produces.CLAIMS: DYN_MAP, Produces.BOOL: "bool"}
_EXPR_TYPE = {Produces.ID: ExprType.STRING, Produces.BOOL: ExprType.BOOL}


def compile_identity(source: str, produces: Produces, *, roles: bool = False, engine: str = "auto") -> Program:
    """``source`` compiled on ``engine`` and type-checked; ``CelCompileError`` (a position inside it) when wrong.

    ``roles``: the expression reads ``principal`` (a role); otherwise ``claims`` (a mapping or a rule).
    """
    if len(source) > MAX_EXPRESSION_CHARS:
        raise CelCompileError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters", kind="cel-too-long")
    variables = ROLE_VARIABLES if roles else CLAIM_VARIABLES
    env = {"principal": PRINCIPAL} if roles else {"claims": DYN_MAP}
    expected = _EXPR_TYPE.get(produces, ExprType.ANY)
    program = get_engine(engine, variables).compile(source, expected)
    try:
        found = analyse(source, expected, env, variables=variables).type
    except CelCompileError:
        try:  # the typed checker does not know it (a function only the C++ engine has): the run time checks
            analyse(source, expected, None, limits=False, variables=variables)
        except CelCompileError:
            found = DYN
        else:
            raise
    want = _STATIC[produces]
    if not compatible(found, want):
        raise CelTypeError(f"expression must evaluate to a {produces.value}, but it is {fmt_type(found)}",
                           1, 1, "cel-type", hint=_HINTS[produces])
    return program


_HINTS = {
    Produces.ID: "the principal's id is a string, such as claims.sub or claims.email",
    Produces.GROUPS: "groups is a list of strings, such as 'has(claims.groups) ? claims.groups : []'",
    Produces.CLAIMS: "principal.claims is a map, such as '{\"email\": claims.email}'",
    Produces.BOOL: "compare, or combine comparisons with && and ||",
}


def result_problem(value: Any, produces: Produces) -> str | None:
    """Why a value an identity expression returned is not what it must produce, or None."""
    if produces is Produces.ID:
        ok = isinstance(value, str) and value != ""
    elif produces is Produces.GROUPS:
        ok = isinstance(value, list) and all(isinstance(g, str) for g in value)
    elif produces is Produces.CLAIMS:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
    else:
        ok = isinstance(value, bool)
    return None if ok else f"must be a {'non-empty ' if produces is Produces.ID else ''}{produces.value}"
