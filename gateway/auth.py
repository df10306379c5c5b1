"""Who is calling: API keys (stored as SHA-256, or read from env/file) mapped to principals.

Keys arrive as ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``. Only hashes are kept in
memory, and they are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.config.load import resolve_secret
from gateway.config.model import AuthSpec
from gateway.policy.call import Principal

__all__ = ["Authenticator", "Identity", "hash_key"]


def hash_key(key: str) -> str:
    """The SHA-256 hex digest the config stores for a key."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller."""

    principal: Principal
    approver: bool = False
    admin: bool = False  # sees every approval request (still decides only what qualifies them)


class Authenticator:
    """Maps a request's credentials to an identity, or None."""

    def __init__(self, spec: AuthSpec, base: Path) -> None:
        self._keys: list[tuple[bytes, Identity]] = []
        for key in spec.api_keys:
            digest = key.sha256.lower() if key.sha256 else hash_key(resolve_secret(key.key, base))  # type: ignore[arg-type]
            principal = Principal(key.principal.id, tuple(key.principal.groups), dict(key.principal.claims))
            self._keys.append((bytes.fromhex(digest), Identity(principal, key.approver, key.admin)))
        anon = spec.anonymous
        self._anonymous = Identity(Principal(anon.id, tuple(anon.groups), dict(anon.claims))) if anon else None

    def identify(self, headers: Mapping[str, str]) -> Identity | None:
        """The caller's identity from request headers; the anonymous one if enabled and no key was sent."""
        key = _presented_key(headers)
        if key is None:
            return self._anonymous
        digest = hashlib.sha256(key.encode()).digest()
        found = None
        for stored, identity in self._keys:
            if hmac.compare_digest(stored, digest):
                found = identity
        return found


def _presented_key(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key else None
