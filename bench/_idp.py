"""Signing keys and access tokens of a made-up identity provider, for the JWT benchmarks.

The benchmarks measure the gateway's side of a token (parse, key lookup, signature, claims, the CEL
mapping), not an IdP: so the tokens are signed here, with fresh keys, and the public keys are served
as a JWKS (``bench/_servers.py issuer``, or in memory for ``bench/tokens.py``). The tokens look like a
real IdP's access tokens: ``typ: at+jwt``, ``iss``, ``aud``, ``sub``, ``exp``, ``iat``, ``jti``,
``scope``, ``groups``, ``email``, ``client_id`` (about 600 bytes).

Used by bench/tokens.py and bench/gateway.py (``--auth``); not meant to be run alone.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

AUDIENCE = "https://gateway.bench.example/mcp"
TOKEN_LIFETIME_S = 6 * 3600  # longer than any run


@dataclass(frozen=True)
class SigningKey:
    """One private key of the IdP, its ``kid`` and the algorithm it signs with."""

    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        """The public half as a JWK (what the JWKS publishes)."""
        public = self.private.public_key()
        kind = {"RS": RSAAlgorithm, "PS": RSAAlgorithm, "ES": ECAlgorithm, "Ed": OKPAlgorithm}[self.alg[:2]]
        jwk = dict(kind.to_jwk(public, as_dict=True))
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


def make_keys(algorithms: tuple[str, ...] = ("RS256", "ES256")) -> dict[str, SigningKey]:
    """A fresh key per algorithm (RSA 2048, P-256, Ed25519), by algorithm."""
    out = {}
    for alg in algorithms:
        if alg[:2] in ("RS", "PS"):
            private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif alg == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        elif alg == "EdDSA":
            private = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(f"no key type for {alg}")
        out[alg] = SigningKey(f"bench-{alg.lower()}", alg, private)
    return out


def jwks(keys: dict[str, SigningKey]) -> dict[str, Any]:
    """The public JWKS of ``keys``."""
    return {"keys": [key.public_jwk() for key in keys.values()]}


def access_token(key: SigningKey, issuer: str, sub: str = "bench-agent", groups: tuple[str, ...] = ("developers",),
                 audience: str = AUDIENCE) -> str:
    """A signed access token as an IdP would issue it (a fresh ``jti`` each time)."""
    now = int(time.time())
    claims = {"iss": issuer, "sub": sub, "aud": audience, "iat": now, "nbf": now, "exp": now + TOKEN_LIFETIME_S,
              "jti": secrets.token_urlsafe(16), "scope": "mcp tools:read", "groups": list(groups),
              "email": f"{sub}@bench.example", "client_id": "bench-client"}
    return jwt.encode(claims, key.private, algorithm=key.alg, headers={"kid": key.kid, "typ": "at+jwt"})


def jwt_config(issuer: str, jwks_uri: str, algorithms: tuple[str, ...]) -> dict[str, Any]:
    """The ``auth.jwt`` entry for this IdP, with a mapping of the kind docs/identity.md shows."""
    return {"issuer": issuer, "jwks_uri": jwks_uri, "audiences": [AUDIENCE], "algorithms": list(algorithms),
            "required_scopes": ["mcp"],
            "principal": {"id": "claims.sub", "groups": "has(claims.groups) ? claims.groups : []",
                          "claims": '{"email": claims.email}'},
            "roles": {"approver": '"leads" in principal.groups'}}
