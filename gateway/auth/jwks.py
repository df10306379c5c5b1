"""The signing keys of each issuer: discovered, fetched, cached, refreshed, and refused when too old.

    discovery   GET {issuer}/.well-known/openid-configuration (unless ``jwks_uri`` is given); its
                ``issuer`` must be the configured one, its ``jwks_uri`` https (http only to loopback)
    fetch       no redirects at all (a 3xx is a failure: the simplest rule that can never lead to
                another host), at most ``MAX_JWKS_BYTES``, all within ``JWKS_FETCH_TIMEOUT_SECONDS``
    keys        public keys only (``kty`` oct is skipped), each bound to the algorithms it can verify
                among those allowed: ``PyJWK`` then verifies with that algorithm, never the header's
    cache       per issuer. Fetches start at most once per ``JWKS_MIN_REFETCH_SECONDS`` whatever asks
                (an unknown ``kid``, a refresh, /readyz); keys older than ``JWKS_REFRESH_SECONDS`` are
                refreshed in the background; a failed fetch keeps the keys until ``max_age`` after the
                last good one, and then every token of the issuer is refused (fail closed); while no
                keys are usable, a failed fetch is retried in the background after
                ``JWKS_RETRY_FIRST_SECONDS``, doubling up to ``JWKS_MIN_REFETCH_SECONDS``
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from gateway.core.capped import TooLarge, read_capped
from gateway.core.errors import TokenRefused
from gateway.core.limits import (
    JWKS_FETCH_TIMEOUT_SECONDS,
    JWKS_MIN_REFETCH_SECONDS,
    JWKS_REFRESH_SECONDS,
    JWKS_RETRY_FIRST_SECONDS,
    MAX_JWKS_BYTES,
    MAX_JWKS_KEYS,
)
from gateway.core.loopback import secure_url_problem

__all__ = ["IssuerKeys", "IssuerStatus", "JwksClient", "KeysUnavailable", "usable_keys"]

log = logging.getLogger("gateway.auth")

# Which key each algorithm needs: (kty, curves or None for any).
_KEY_TYPES: dict[str, tuple[str, frozenset[str] | None]] = {
    **{f"{p}{n}": ("RSA", None) for p in ("RS", "PS") for n in (256, 384, 512)},
    "ES256": ("EC", frozenset({"P-256"})), "ES384": ("EC", frozenset({"P-384"})), "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}


class KeysUnavailable(Exception):
    """A fetch of an issuer's keys failed; the message is short and names no URL (/readyz shows it)."""


class JwksClient:
    """Fetches discovery documents and key sets over one HTTP client, with the caps of the module docstring."""

    def __init__(self, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self._client = httpx2.AsyncClient(follow_redirects=False, transport=transport)

    async def key_set(self, issuer: str, jwks_uri: str | None) -> Mapping[str, Any]:
        """The JWKS document of ``issuer`` (discovering where it is unless ``jwks_uri`` is given)."""
        try:
            async with asyncio.timeout(JWKS_FETCH_TIMEOUT_SECONDS):
                if jwks_uri is None:
                    meta = await self._json(issuer.rstrip("/") + "/.well-known/openid-configuration", "discovery")
                    if meta.get("issuer") != issuer:
                        raise KeysUnavailable("discovery: the document names another issuer")
                    jwks_uri = meta.get("jwks_uri")
                    if not isinstance(jwks_uri, str) or secure_url_problem(jwks_uri) is not None:
                        raise KeysUnavailable("discovery: jwks_uri missing or not https")
                return await self._json(jwks_uri, "jwks")
        except TimeoutError:
            raise KeysUnavailable(f"no answer within {JWKS_FETCH_TIMEOUT_SECONDS:g}s") from None

    async def _json(self, url: str, what: str) -> Mapping[str, Any]:
        try:
            async with self._client.stream("GET", url, headers={"accept": "application/json"},
                                           timeout=JWKS_FETCH_TIMEOUT_SECONDS) as response:
                if response.is_redirect:
                    raise KeysUnavailable(f"{what}: redirects are not followed (HTTP {response.status_code})")
                if response.status_code != 200:
                    raise KeysUnavailable(f"{what}: HTTP {response.status_code}")
                body = await read_capped(response, MAX_JWKS_BYTES)
        except TooLarge:
            raise KeysUnavailable(f"{what}: larger than {MAX_JWKS_BYTES} bytes") from None
        except httpx2.TimeoutException:
            raise KeysUnavailable(f"{what}: no answer within {JWKS_FETCH_TIMEOUT_SECONDS:g}s") from None
        except httpx2.HTTPError as exc:
            raise KeysUnavailable(f"{what}: {type(exc).__name__}") from None
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise KeysUnavailable(f"{what}: not JSON") from None
        if not isinstance(doc, dict):
            raise KeysUnavailable(f"{what}: not a JSON object")
        return doc

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def usable_keys(doc: Mapping[str, Any], algorithms: Sequence[str]) -> list[tuple[str | None, PyJWK]]:
    """(kid, key bound to one algorithm) for every public signing key of a JWKS that an allowed algorithm can use."""
    keys = doc.get("keys")
    if not isinstance(keys, list):
        raise KeysUnavailable("jwks: no 'keys' list")
    if len(keys) > MAX_JWKS_KEYS:
        raise KeysUnavailable(f"jwks: more than {MAX_JWKS_KEYS} keys")
    found: list[tuple[str | None, PyJWK]] = []
    for jwk in keys:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        for alg in algorithms:
            kty, curves = _KEY_TYPES[alg]
            if jwk.get("kty") != kty or (curves is not None and jwk.get("crv") not in curves):
                continue
            if jwk.get("alg", alg) != alg:
                continue
            try:
                key = PyJWK(dict(jwk), algorithm=alg)
                if key.Algorithm.check_key_length(key.key):  # a message when too short (RSA under 2048 bits)
                    continue
            except (PyJWTError, ValueError, TypeError):
                continue
            found.append((kid if isinstance(kid, str) else None, key))
    if not found:
        raise KeysUnavailable("jwks: no usable signing key")
    return found


@dataclass(frozen=True, slots=True)
class IssuerStatus:
    """Whether an issuer's tokens can be checked now (for /readyz): ``up``, ``stale``, ``down`` or ``pending``."""

    issuer: str
    state: str  # up: fresh keys; stale: usable keys, the last fetch failed; down: none usable; pending: none yet
    keys: int
    last_error: str | None

    @property
    def ready(self) -> bool:
        """Whether tokens of this issuer are checked (stale keys still check them)."""
        return self.state in ("up", "stale")

    def to_dict(self) -> dict[str, Any]:
        """The JSON /readyz shows."""
        return {"issuer": self.issuer, "state": self.state, "keys": self.keys, "last_error": self.last_error}


class IssuerKeys:
    """One issuer's cached keys (module docstring); ``clock`` is monotonic seconds (a test passes its own)."""

    def __init__(self, issuer: str, jwks_uri: str | None, algorithms: Sequence[str], max_age: float,
                 client: JwksClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.issuer = issuer
        self.jwks_uri = jwks_uri
        self.algorithms = tuple(algorithms)
        self.max_age = max_age
        self.refresh_after = min(JWKS_REFRESH_SECONDS, max_age / 2)
        self.clock = clock
        self.generation = 0  # bumped whenever the set changes (verified tokens of an older set are checked again)
        self._client = client
        self._named: dict[tuple[str, str], PyJWK] = {}  # (kid, alg) → key
        self._all: dict[str, list[PyJWK]] = {}  # alg → every key of it, for a token without a kid
        self._fetched_at: float | None = None  # when the keys were last fetched successfully
        self._attempted_at: float | None = None
        self._last_error: str | None = None
        self._fetch: asyncio.Task[None] | None = None
        self._fingerprint = ""
        self._failures = 0  # failed fetches in a row
        self._retry: asyncio.TimerHandle | None = None
        self.fetches = 0  # fetches started (for tests and logs)

    def usable(self) -> bool:
        """Whether the cached keys may still be used (fetched less than ``max_age`` ago)."""
        return self._fetched_at is not None and self.clock() - self._fetched_at < self.max_age

    async def keys_for(self, kid: str | None, alg: str) -> list[PyJWK]:
        """The keys that may have signed a token with this ``kid`` and ``alg``; ``TokenRefused`` if none."""
        if not self.usable():
            await self.refetch()
            if not self.usable():
                raise TokenRefused("keys-unavailable")
        found = self._lookup(kid, alg)
        if not found and kid is not None:  # a key the issuer may have added since: look once (rate-limited)
            await self.refetch()
            found = self._lookup(kid, alg) if self.usable() else []
        if not found:
            raise TokenRefused("unknown-key")
        if self._fetched_at is not None and self.clock() - self._fetched_at >= self.refresh_after:
            self.refresh()
        return found

    def _lookup(self, kid: str | None, alg: str) -> list[PyJWK]:
        if kid is None:
            return self._all.get(alg, [])
        key = self._named.get((kid, alg))
        return [] if key is None else [key]

    def _interval(self) -> float:
        """How long after a fetch the next may start: the rate limit, shorter while no keys are usable."""
        if self.usable() or self._failures == 0:
            return JWKS_MIN_REFETCH_SECONDS
        return min(JWKS_MIN_REFETCH_SECONDS, JWKS_RETRY_FIRST_SECONDS * float(2 ** (self._failures - 1)))

    def _may_fetch(self) -> bool:
        return self._attempted_at is None or self.clock() - self._attempted_at >= self._interval()

    def refresh(self) -> asyncio.Task[None] | None:
        """Start a fetch in the background if none runs and the rate limit allows one; the running fetch, if any."""
        if self._fetch is None and self._may_fetch():
            self._attempted_at = self.clock()
            self.fetches += 1
            self._fetch = asyncio.get_running_loop().create_task(self._run(), name=f"jwks {self.issuer}")
        return self._fetch

    async def refetch(self) -> None:
        """Fetch now (or wait for the fetch under way), unless the rate limit says it is too soon."""
        task = self.refresh()
        if task is not None:
            await asyncio.shield(task)  # a caller that gives up does not cancel the fetch for the others

    async def _run(self) -> None:
        try:
            doc = await self._client.key_set(self.issuer, self.jwks_uri)
            found = usable_keys(doc, self.algorithms)
        except KeysUnavailable as exc:
            self._failed(str(exc))
            log.warning("keys of issuer %s not fetched: %s", self.issuer, exc)
        except Exception as exc:  # a broken fetch is still only a failed fetch: the cache keeps its keys
            self._failed(f"fetch failed ({type(exc).__name__})")
            log.exception("keys of issuer %s not fetched", self.issuer)
        else:
            self._failures = 0
            self._install(found, json.dumps(doc.get("keys"), sort_keys=True))
        finally:
            self._fetch = None

    def _failed(self, error: str) -> None:
        """Note a failed fetch; with no usable keys, try again in the background after the back-off."""
        self._last_error = error
        self._failures += 1
        if not self.usable():
            if self._retry is not None:
                self._retry.cancel()
            self._retry = asyncio.get_running_loop().call_later(self._interval(), self.refresh)

    def _install(self, found: list[tuple[str | None, PyJWK]], fingerprint: str) -> None:
        named: dict[tuple[str, str], PyJWK] = {}
        every: dict[str, list[PyJWK]] = {}
        for kid, key in found:
            if kid is not None:
                named.setdefault((kid, key.algorithm_name), key)
            every.setdefault(key.algorithm_name, []).append(key)
        if fingerprint != self._fingerprint:
            self.generation += 1
            self._fingerprint = fingerprint
        self._named, self._all = named, every
        self._fetched_at = self.clock()
        self._last_error = None

    def status(self) -> IssuerStatus:
        """This issuer's state for /readyz; keys that are due (or missing) are fetched in the background."""
        with contextlib.suppress(RuntimeError):  # outside an event loop nothing is started
            if not self.usable() or self.clock() - (self._fetched_at or 0.0) >= self.refresh_after:
                self.refresh()
        count = sum(map(len, self._all.values()))
        if self.usable():
            state = "up" if self._last_error is None else "stale"
        elif self._fetched_at is None and self._last_error is None:
            state = "pending"
        else:
            state = "down"
        error = self._last_error
        if state == "down" and self._fetched_at is not None:
            error = f"keys older than jwks_max_age; last fetch: {error or 'not yet retried'}"
        return IssuerStatus(self.issuer, state, count if self.usable() else 0, error)

    async def aclose(self) -> None:
        """Cancel a fetch under way and any retry planned."""
        if self._retry is not None:
            self._retry.cancel()
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fetch
