"""Bearer tokens that are JWTs: verified as the standards say, then mapped to an identity by the issuer's CEL.

The life of one token, each step refusing it (``TokenRefused``, a bounded ``reason``) or passing it on:

    size        at most ``MAX_BEARER_TOKEN_BYTES``, the header ``MAX_JWT_HEADER_BYTES``   too-large
    header      JSON; ``typ`` absent, ``JWT`` or ``at+jwt`` (RFC 9068); ``kid`` a string  malformed, bad-type
    issuer      the unverified ``iss`` picks the one authenticator of that issuer        unknown-issuer
    algorithm   on that issuer's allow-list (never ``none``, never HMAC)                 bad-algorithm
    key         from the issuer's JWKS by ``kid`` (gateway/auth/jwks.py)                 unknown-key, keys-unavailable
    signature   PyJWT, with the key bound to its algorithm                               bad-signature
    claims      ``iss``; ``aud`` one of the audiences; ``exp`` required; ``nbf`` and     bad-audience, expired,
                ``iat``, all with the clock skew                                         not-yet-valid
    scopes      each of ``required_scopes`` in ``scope`` (or ``scp``)                    insufficient-scope (403)
    identity    the CEL rules, mappings and roles (gateway/auth/claims.py)               missing-subject,
                                                                                         rule-failed, bad-claims

A token verified once is remembered by its SHA-256 until it expires (or its issuer's key set changes), so
its next call costs a dictionary lookup and the expiry check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jwt as pyjwt
from jwt import exceptions as jwt_errors

from gateway.auth.claims import ClaimMapping
from gateway.auth.identity import Identity
from gateway.auth.jwks import IssuerKeys, IssuerStatus, JwksClient
from gateway.core.errors import TOKEN_REFUSALS, TokenRefused
from gateway.core.limits import MAX_BEARER_TOKEN_BYTES, MAX_JWT_HEADER_BYTES, MAX_VERIFIED_TOKENS

__all__ = ["TOKEN_REFUSALS", "JwtAuthenticator", "JwtAuthenticators", "TokenRefused"]

_ACCESS_TYPES = frozenset({"at+jwt", "jwt"})  # compared without an "application/" prefix, in lower case
_BASE64URL = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")

# PyJWT's errors by the reason they are, most specific first (InvalidSignatureError is a DecodeError).
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt_errors.ExpiredSignatureError, "expired"),
    (jwt_errors.ImmatureSignatureError, "not-yet-valid"),
    (jwt_errors.InvalidAudienceError, "bad-audience"),
    (jwt_errors.InvalidIssuerError, "unknown-issuer"),
    (jwt_errors.InvalidSignatureError, "bad-signature"),
    (jwt_errors.InvalidAlgorithmError, "bad-algorithm"),
    (jwt_errors.InvalidKeyError, "bad-signature"),
    (jwt_errors.InvalidSubjectError, "missing-subject"),
    (jwt_errors.MissingRequiredClaimError, "bad-claims"),
)


def _reason(exc: Exception) -> str:
    if isinstance(exc, jwt_errors.MissingRequiredClaimError) and exc.claim == "aud":
        return "bad-audience"
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return "malformed"


def _segment(text: str) -> dict[str, Any]:
    """A JSON object from one base64url segment of a compact JWS; ``TokenRefused`` (malformed) otherwise."""
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        raise TokenRefused("malformed") from None
    if not isinstance(value, dict):
        raise TokenRefused("malformed")
    return value


class JwtAuthenticator:
    """One issuer's tokens: its audiences, algorithms, skew, keys, required scopes and claim mapping (plain values)."""

    def __init__(self, issuer: str, audiences: Sequence[str], algorithms: Sequence[str], clock_skew: float,
                 keys: IssuerKeys, mapping: ClaimMapping, required_scopes: Sequence[str] = ()) -> None:
        self.issuer = issuer
        self.audiences = tuple(audiences)
        self.algorithms = frozenset(algorithms)
        self.clock_skew = clock_skew
        self.keys = keys
        self.mapping = mapping
        self.required_scopes = tuple(required_scopes)

    async def verify(self, token: str, header: Mapping[str, Any], audiences: Sequence[str]) -> dict[str, Any]:
        """The verified claims of ``token`` (its header already read), for one of ``audiences``."""
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise TokenRefused("bad-algorithm")
        kid = header.get("kid")
        failure: Exception | None = None
        for key in await self.keys.keys_for(kid if isinstance(kid, str) else None, alg):
            try:
                claims = pyjwt.decode(token, key, algorithms=[alg], audience=list(audiences), issuer=self.issuer,
                                      leeway=self.clock_skew,
                                      options=cast(Any, {"require": ["exp"], "enforce_minimum_key_length": True}))
            except jwt_errors.InvalidSignatureError as exc:  # a token without a kid: try the next key of its alg
                failure = exc
                continue
            except jwt_errors.PyJWTError as exc:
                reason = _reason(exc)
                if reason == "bad-claims" and isinstance(exc, jwt_errors.MissingRequiredClaimError):
                    raise TokenRefused(reason, f"The token has no '{exc.claim}' claim.") from None
                raise TokenRefused(reason) from None
            return claims
        raise TokenRefused(_reason(failure) if failure else "unknown-key")

    def missing_scopes(self, claims: Mapping[str, Any]) -> list[str]:
        """The required scopes ``claims`` do not grant (``scope`` as RFC 9068 writes it, or ``scp`` as a list)."""
        if not self.required_scopes:
            return []
        granted: set[str] = set()
        for name in ("scope", "scp"):
            value = claims.get(name)
            if isinstance(value, str):
                granted.update(value.split())
            elif isinstance(value, list):
                granted.update(v for v in value if isinstance(v, str))
        return [s for s in self.required_scopes if s not in granted]


class JwtAuthenticators:
    """Every configured issuer; a token goes only to the authenticator of its own ``iss``.

    ``refused`` is told the reason of every refusal (metrics); ``clock`` gives wall-clock seconds for the
    expiry of remembered tokens (a test passes its own).
    """

    def __init__(self, authenticators: Sequence[JwtAuthenticator], client: JwksClient | None = None,
                 refused: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self._by_issuer = {a.issuer: a for a in authenticators}
        self._client = client
        self.refused = refused
        self._clock = clock
        # SHA-256 of a verified token → (its identity, when it stops being valid, its issuer's key generation)
        self._verified: OrderedDict[bytes, tuple[Identity, float, int]] = OrderedDict()

    def handles(self, token: str) -> bool:
        """Whether a bearer value is a JWS compact token (three base64url parts, a JSON header) for these issuers."""
        return (bool(self._by_issuer) and token.startswith("eyJ") and token.count(".") == 2
                and _BASE64URL.issuperset(token[:MAX_JWT_HEADER_BYTES].encode("latin-1", "replace")))

    async def identify(self, token: str) -> Identity:
        """The identity of a valid token; ``TokenRefused`` (counted by reason) for any other."""
        try:
            return await self._identify(token)
        except TokenRefused as exc:
            if self.refused is not None:
                self.refused(exc.reason)
            raise

    async def _identify(self, token: str) -> Identity:
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None:
            identity, until, generation = known
            keys = self._by_issuer[identity.principal.issuer].keys
            if self._clock() < until and generation == keys.generation and keys.usable():
                return identity
            del self._verified[digest]
        header, payload = self._unverified(token)
        issuer = payload.get("iss")
        authenticator = self._by_issuer.get(issuer) if isinstance(issuer, str) else None
        if authenticator is None:
            raise TokenRefused("unknown-issuer")
        claims = await authenticator.verify(token, header, authenticator.audiences)
        missing = authenticator.missing_scopes(claims)
        if missing:
            raise TokenRefused("insufficient-scope", f"The token lacks the scope {' '.join(missing)}.",
                               scope=" ".join(missing))
        identity = authenticator.mapping.identity(authenticator.issuer, claims, token)
        self._remember(digest, identity, float(claims["exp"]) + authenticator.clock_skew, authenticator.keys)
        return identity

    def _remember(self, digest: bytes, identity: Identity, until: float, keys: IssuerKeys) -> None:
        self._verified[digest] = (identity, until, keys.generation)
        while len(self._verified) > MAX_VERIFIED_TOKENS:
            self._verified.popitem(last=False)

    def _unverified(self, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The header (checked) and the payload of a token, before its signature is checked."""
        if len(token) > MAX_BEARER_TOKEN_BYTES:
            raise TokenRefused("too-large", f"The token is larger than {MAX_BEARER_TOKEN_BYTES} bytes.")
        head, _, rest = token.partition(".")
        if len(head) > MAX_JWT_HEADER_BYTES:
            raise TokenRefused("too-large", f"The token's header is larger than {MAX_JWT_HEADER_BYTES} bytes.")
        body, _, _ = rest.partition(".")
        header = _segment(head)
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.lower().removeprefix("application/")
                                not in _ACCESS_TYPES):
            raise TokenRefused("bad-type")
        if "kid" in header and not isinstance(header["kid"], str):
            raise TokenRefused("malformed")
        return header, _segment(body)

    async def verify(self, token: str, *, issuer: str, audiences: Sequence[str]) -> dict[str, Any]:
        """The verified claims of a token of ``issuer`` for one of ``audiences`` (signature, iss, aud, time, alg only).

        Single sign-on checks ID tokens with it (``audiences=[client_id]``); ``TokenRefused`` otherwise.
        """
        header, payload = self._unverified(token)
        authenticator = self._by_issuer.get(issuer)
        if authenticator is None or payload.get("iss") != issuer:
            raise TokenRefused("unknown-issuer")
        return await authenticator.verify(token, header, audiences)

    def identity_for_claims(self, issuer: str, claims: Mapping[str, Any], token: str | None = None) -> Identity:
        """The identity the issuer's rules, mappings and roles give verified ``claims`` (single sign-on uses it)."""
        authenticator = self._by_issuer.get(issuer)
        if authenticator is None:
            raise TokenRefused("unknown-issuer")
        return authenticator.mapping.identity(issuer, claims, token)

    def keys(self, issuer: str) -> IssuerKeys:
        """The key cache of ``issuer`` (KeyError if it is not configured)."""
        return self._by_issuer[issuer].keys

    def status(self) -> list[IssuerStatus]:
        """Each issuer's keys, for /readyz (a due refresh starts in the background)."""
        return [a.keys.status() for a in self._by_issuer.values()]

    def start(self) -> None:
        """Fetch every issuer's keys in the background (call inside the event loop, when serving starts)."""
        for authenticator in self._by_issuer.values():
            authenticator.keys.refresh()

    async def aclose(self) -> None:
        """Stop fetches under way and close the HTTP client."""
        for authenticator in self._by_issuer.values():
            await authenticator.keys.aclose()
        if self._client is not None:
            await self._client.aclose()
