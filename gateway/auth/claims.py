"""A verified token's claims to an identity: the issuer's CEL rules, claim mappings and roles.

    rules      every one must be true, else the token is refused (``rule-failed``) with the rule's message;
               a rule that cannot be evaluated (a claim it reads is absent) is false
    mappings   ``principal.id`` (a non-empty string), ``groups`` (a list of strings), ``claims`` (a map);
               a mapping that fails or gives another type refuses the token (``bad-claims``)
    roles      over the mapped principal; false unless true (an error is false). A principal that is
               ``metrics`` is scrape-only: it is then neither approver nor admin, as for API keys
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.auth.identity import Identity
from gateway.core.errors import CelEvaluationError, TokenRefused
from gateway.policy.call import Principal
from gateway.policy.cel import Program, get_engine
from gateway.policy.identity_exprs import CLAIM_VARIABLES, ROLE_VARIABLES, Produces, compile_identity, result_problem

__all__ = ["ClaimMapping"]

ROLES = ("approver", "admin", "metrics")


class ClaimMapping:
    """One issuer's compiled expressions (plain sources in, compiled once here)."""

    def __init__(self, *, id: str, groups: str, claims: str, rules: Sequence[tuple[str, str]] = (),
                 roles: Mapping[str, str] | None = None, engine: str = "auto") -> None:
        """Sources of the mappings, the rules as (expression, message) and the roles by name (each "false" if absent).

        Raises ``CelCompileError`` for an expression that does not compile (the config check reports them first).
        """
        self._claims_engine = get_engine(engine, CLAIM_VARIABLES)
        self._roles_engine = get_engine(engine, ROLE_VARIABLES)
        self._mappings: tuple[tuple[str, Produces, Program], ...] = tuple(
            (name, produces, compile_identity(source, produces, engine=engine))
            for name, produces, source in (("id", Produces.ID, id), ("groups", Produces.GROUPS, groups),
                                           ("claims", Produces.CLAIMS, claims)))
        self._rules = tuple((compile_identity(e, Produces.BOOL, engine=engine), m) for e, m in rules)
        given = roles or {}
        self._roles = tuple((name, compile_identity(given.get(name, "false"), Produces.BOOL, roles=True,
                                                    engine=engine)) for name in ROLES)

    def identity(self, issuer: str, claims: Mapping[str, Any], token: str | None = None) -> Identity:
        """The identity of verified ``claims`` of ``issuer``; ``TokenRefused`` when a rule or mapping refuses them."""
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenRefused("missing-subject")
        try:
            activation = self._claims_engine.activation({"claims": dict(claims)})
        except CelEvaluationError:
            raise TokenRefused("bad-claims", "The token's claims cannot be read as JSON values.") from None
        for program, message in self._rules:
            if _evaluate(program, activation) is not True:
                raise TokenRefused("rule-failed", message)
        mapped: dict[str, Any] = {}
        for name, produces, program in self._mappings:
            value = _evaluate(program, activation)
            problem = "cannot be evaluated" if value is _FAILED else result_problem(value, produces)
            if problem is not None:
                raise TokenRefused("bad-claims", f"The token's claims do not map to a principal: principal.{name}"
                                   f" {problem}.")
            mapped[name] = value
        jti = claims.get("jti")
        principal = Principal(mapped["id"], tuple(mapped["groups"]), mapped["claims"], kind="jwt", issuer=issuer,
                              subject=subject,
                              token_id_hash=hashlib.sha256(jti.encode()).hexdigest() if isinstance(jti, str) else "")
        roles = self._grant(principal)
        if roles["metrics"]:
            roles["approver"] = roles["admin"] = False
        return Identity(principal, roles["approver"], roles["admin"], roles["metrics"], token=token)

    def _grant(self, principal: Principal) -> dict[str, bool]:
        try:
            activation = self._roles_engine.activation({"principal": principal.to_cel()})
        except CelEvaluationError:
            return dict.fromkeys(ROLES, False)
        return {name: _evaluate(program, activation) is True for name, program in self._roles}


_FAILED = object()


def _evaluate(program: Program, activation: Any) -> Any:
    try:
        return program.evaluate(activation)
    except CelEvaluationError:
        return _FAILED
