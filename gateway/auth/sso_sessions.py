"""Approvers' sign-in sessions, held by this gateway process: a random cookie value names one.

A session is the identity the IdP vouched for at sign-in (roles included), a CSRF token the page sends
back with every change, the ID token (for signing out at the IdP) and a fixed end. Only the SHA-256 of
the cookie value is kept, compared in constant time by lookup of the digest. A session ends at its
lifetime (it is not renewed by use: an approver whose role is taken away at the IdP decides at most
until then), at sign-out (``end``), or when the table is full and it is the oldest.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.auth.identity import Identity
from gateway.core.limits import MAX_SSO_SESSIONS

__all__ = ["Session", "Sessions"]


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in approver."""

    identity: Identity
    csrf: str = field(repr=False)
    expires: float  # monotonic
    expires_at: float  # wall clock, for the page
    id_token: str | None = field(default=None, repr=False)

    def csrf_matches(self, sent: str | None) -> bool:
        """Whether a request's CSRF token is this session's (constant time)."""
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Sessions:
    """The signed-in approvers of this process, by the digest of their cookie value."""

    def __init__(self, lifetime: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, limit: int = MAX_SSO_SESSIONS) -> None:
        self.lifetime = lifetime
        self._clock = clock
        self._wall = wall
        self._limit = limit
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # oldest first

    def create(self, identity: Identity, id_token: str | None = None) -> tuple[str, Session]:
        """A new session; returns the cookie value (given out once, never stored) and the session."""
        now = self._clock()
        while self._sessions and (len(self._sessions) >= self._limit
                                  or next(iter(self._sessions.values())).expires <= now):
            self._sessions.popitem(last=False)
        value = secrets.token_urlsafe(32)
        session = Session(identity, secrets.token_urlsafe(32), now + self.lifetime, self._wall() + self.lifetime,
                          id_token)
        self._sessions[_digest(value)] = session
        return value, session

    def get(self, value: str | None) -> Session | None:
        """The live session this cookie value names, or None (unknown, ended or expired)."""
        if not value or len(value) > 128:
            return None
        key = _digest(value)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires <= self._clock():
            del self._sessions[key]
            return None
        return session

    def end(self, value: str | None) -> Session | None:
        """End the session this cookie value names (sign-out); returns it, or None if there was none."""
        if not value or len(value) > 128:
            return None
        return self._sessions.pop(_digest(value), None)

    def __len__(self) -> int:
        return len(self._sessions)
