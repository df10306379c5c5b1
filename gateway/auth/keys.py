"""Who is calling: API keys (stored as SHA-256, or read from env/file) and identity providers' JWTs, to principals.

Keys arrive as ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, exactly one of them, once. Only
hashes are kept in memory, and they are compared in constant time. A credential that is presented
but unusable (another scheme, an empty value, a repeated header) is refused, never anonymous.
A bearer value that is a JWT for the configured issuers goes to the JWT authenticators
(gateway/auth/jwt.py), which refuse it (``TokenRefused``) or give its identity; API keys work beside them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from gateway.auth.identity import Identity
from gateway.auth.jwt import JwtAuthenticators
from gateway.core.errors import AmbiguousCredentials, CredentialError

__all__ = ["Authenticator", "Identity", "hash_key", "presented_key"]  # Identity is gateway.auth.identity's


def hash_key(key: str) -> str:
    """The SHA-256 hex digest the config stores for a key."""
    return hashlib.sha256(key.encode()).hexdigest()


class Authenticator:
    """Maps a request's credentials to an identity, or None."""

    def __init__(self, keys: Sequence[tuple[str, Identity]], anonymous: Identity | None = None,
                 jwt: JwtAuthenticators | None = None) -> None:
        """``keys``: (SHA-256 hex digest of the key, its identity); ``anonymous``: who a request without a
        credential is, or None to refuse it; ``jwt``: the identity providers whose tokens are accepted."""
        self._keys = [(bytes.fromhex(digest.lower()), identity) for digest, identity in keys]
        self._anonymous = anonymous
        self.jwt = jwt

    async def identify(self, headers: Iterable[tuple[bytes, bytes]]) -> Identity | None:
        """The caller's identity from raw request headers; the anonymous one if enabled and no credential
        was sent at all. Raises ``CredentialError`` for a credential that cannot be used (``TokenRefused``
        for a JWT that is not accepted)."""
        key = presented_key(headers)
        if key is None:
            return self._anonymous
        if self.jwt is not None and self.jwt.handles(key):
            return await self.jwt.identify(key)
        digest = hashlib.sha256(key.encode()).digest()
        found = None
        for stored, identity in self._keys:
            if hmac.compare_digest(stored, digest):
                found = identity
        return found

    def start(self) -> None:
        """Start fetching the identity providers' keys (inside the event loop, when serving starts)."""
        if self.jwt is not None:
            self.jwt.start()

    async def aclose(self) -> None:
        """Stop the identity providers' key fetches."""
        if self.jwt is not None:
            await self.jwt.aclose()


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The API key a request presents, or None when it presents no credential at all."""
    auth: list[str] = []
    api: list[str] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"authorization":
            auth.append(value.decode("latin-1"))
        elif lowered == b"x-api-key":
            api.append(value.decode("latin-1"))
    if not auth and not api:
        return None
    if len(auth) + len(api) > 1:
        # two credentials could be read two ways (a proxy may keep the first, we the last): refuse both
        raise AmbiguousCredentials("Send exactly one credential: one 'Authorization: Bearer KEY' header"
                                   " or one 'X-API-Key' header.")
    if auth:
        scheme, _, token = auth[0].strip().partition(" ")
        if scheme.lower() != "bearer":
            raise CredentialError("Only 'Authorization: Bearer KEY' is accepted.")
        key = token.strip()
    else:
        key = api[0].strip()
    if not key:
        raise CredentialError("The API key is empty. Send an API key as 'Authorization: Bearer KEY'.")
    return key
