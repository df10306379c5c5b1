"""`auth.jwt`: the identity providers whose tokens are accepted, and the CEL that maps their claims.

Each entry is one issuer. Its expressions are compiled and type-checked when the config loads
(``jwt_problems``), with ``file:line:col`` errors like a policy's, so a bad one stops the load.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import Field, field_validator

from gateway.config.fields import check_duration
from gateway.core.diagnostics import Diagnostic
from gateway.core.durations import parse_duration
from gateway.core.errors import CelCompileError
from gateway.core.limits import JWKS_MIN_REFETCH_SECONDS, MAX_CLOCK_SKEW_SECONDS
from gateway.core.loopback import secure_url_problem
from gateway.core.sourcemap import Path as DocPath
from gateway.core.sourcemap import YamlDocument
from gateway.core.strict import StrictModel
from gateway.policy.cel.pure_check import CelTypeError
from gateway.policy.identity_exprs import Produces, compile_identity

__all__ = ["ACCEPTED_ALGORITHMS", "JwtPrincipalSpec", "JwtRolesSpec", "JwtRuleSpec", "JwtSpec", "jwt_problems"]

# Asymmetric signatures only: a JWKS publishes public keys, and an HMAC "verified" with a public key
# is a forgery anyone can make (`none` is no signature at all).
ACCEPTED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class JwtPrincipalSpec(StrictModel):
    """How a token's claims become the principal policies see: CEL over ``claims``."""

    id: str = "claims.sub"
    groups: str = "has(claims.groups) ? claims.groups : []"
    claims: str = "claims"


class JwtRuleSpec(StrictModel):
    """A validation rule: a CEL bool over ``claims``; a token for which it is false is refused with ``message``."""

    expression: str
    message: str = Field(min_length=1)


class JwtRolesSpec(StrictModel):
    """Roles of the principal: CEL bools over ``principal``, each false unless said."""

    approver: str = "false"
    admin: str = "false"
    metrics: str = "false"


class JwtSpec(StrictModel):
    """One identity provider: its issuer, where its keys are, the audiences accepted, and the claim mappings."""

    issuer: str
    jwks_uri: str | None = None  # default: discovered at {issuer}/.well-known/openid-configuration
    audiences: list[str] = Field(min_length=1)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "PS256", "EdDSA"], min_length=1)
    clock_skew: str | int | float = "30s"
    principal: JwtPrincipalSpec = Field(default_factory=JwtPrincipalSpec)
    rules: list[JwtRuleSpec] = Field(default_factory=list)
    roles: JwtRolesSpec = Field(default_factory=JwtRolesSpec)
    required_scopes: list[str] = Field(default_factory=list)  # each must be in the token's scope (else 403)
    jwks_max_age: str | int | float = "24h"  # cached keys serve this long after the last good fetch, then fail closed

    _durations = field_validator("clock_skew", "jwks_max_age")(check_duration)

    @field_validator("issuer", "jwks_uri")
    @classmethod
    def _secure(cls, value: str | None) -> str | None:
        problem = None if value is None else secure_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, value: list[str]) -> list[str]:
        for name in value:
            if name.lower() == "none" or name.upper().startswith("HS"):
                raise ValueError(f"{name!r} is never accepted: tokens must be signed with a key from the issuer's"
                                 f" JWKS (choose from {', '.join(ACCEPTED_ALGORITHMS)})")
            if name not in ACCEPTED_ALGORITHMS:
                raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(ACCEPTED_ALGORITHMS)}")
        return value

    @field_validator("jwks_max_age")
    @classmethod
    def _long_enough(cls, value: str | int | float) -> str | int | float:
        # keys are refetched at most every JWKS_MIN_REFETCH_SECONDS: a shorter age would refuse good tokens
        if parse_duration(value) < 2 * JWKS_MIN_REFETCH_SECONDS:
            raise ValueError(f"jwks_max_age must be at least {2 * JWKS_MIN_REFETCH_SECONDS:g}s (keys are refetched"
                             f" at most every {JWKS_MIN_REFETCH_SECONDS:g}s)")
        return value

    @field_validator("clock_skew")
    @classmethod
    def _small_skew(cls, value: str | int | float) -> str | int | float:
        if not 0 <= parse_duration(value) <= MAX_CLOCK_SKEW_SECONDS:
            raise ValueError(f"clock_skew must be between 0 and {MAX_CLOCK_SKEW_SECONDS:g}s: a larger one keeps"
                             " expired tokens working")
        return value

    @field_validator("required_scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        if any(not s or any(c.isspace() for c in s) for s in value):
            raise ValueError("a scope is one non-empty word (scopes are separated by spaces in tokens)")
        return value


def _expressions(spec: JwtSpec) -> Iterator[tuple[DocPath, str, Produces, bool]]:
    """Every expression of one issuer: (where it is under the entry, its source, what it makes, a role)."""
    yield ("principal", "id"), spec.principal.id, Produces.ID, False
    yield ("principal", "groups"), spec.principal.groups, Produces.GROUPS, False
    yield ("principal", "claims"), spec.principal.claims, Produces.CLAIMS, False
    for i, rule in enumerate(spec.rules):
        yield ("rules", i, "expression"), rule.expression, Produces.BOOL, False
    for role in ("approver", "admin", "metrics"):
        yield ("roles", role), getattr(spec.roles, role), Produces.BOOL, True


_HINTS = {
    "cel-undeclared": "claim mappings and rules read only `claims`; roles read only `principal`",
    "cel-compile": "check the CEL syntax near this column",
}


def jwt_problems(specs: list[JwtSpec], doc: YamlDocument, file: Path, engine: str) -> list[Diagnostic]:
    """Every problem of ``auth.jwt``: issuers named twice, expressions that do not compile or type-check."""
    out: list[Diagnostic] = []
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        here: DocPath = ("auth", "jwt", i)
        if spec.issuer in seen:
            pos = doc.position((*here, "issuer"))
            out.append(Diagnostic("duplicate-issuer", f"issuer {spec.issuer!r} is listed twice", str(file),
                                  pos.line, pos.column, hint="a token is checked by the one entry of its issuer:"
                                  " merge the two entries"))
        seen.add(spec.issuer)
        for where, source, produces, role in _expressions(spec):
            try:
                compile_identity(source, produces, roles=role, engine=engine)
            except CelCompileError as exc:
                pos = doc.locate((*here, *where), exc.line, exc.column)
                hint = exc.hint if isinstance(exc, CelTypeError) and exc.hint else _HINTS.get(exc.code)
                out.append(Diagnostic(exc.code, f"{exc.message} in {source!r}", str(file), pos.line, pos.column,
                                      hint=hint))
    return out
