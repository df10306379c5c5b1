"""Per-principal limits: calls running at once, calls per minute (a token bucket), calls held for approval.

One key must not be able to take every upstream connection or drown the audit log, and what it
uses must not count against anyone else. Every call a frontend hands in counts, whatever its
outcome: a poll of a pending approval is a request too. Calls held open on a connection while they
wait for an approval count separately (``hold``): past that share they are answered "pending" at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LimitExceeded", "PrincipalLimits"]


@dataclass(frozen=True, slots=True)
class LimitExceeded:
    """Why a call was refused, and when trying again may succeed (seconds)."""

    message: str
    retry_after: int


@dataclass(slots=True)
class _Usage:
    running: int
    tokens: float
    updated: float
    held: int = 0


class PrincipalLimits:
    """Counts each principal's running calls and spends its per-minute budget."""

    def __init__(self, max_concurrent: int | None = None, per_minute: int | None = None,
                 clock: Callable[[], float] = time.monotonic, max_held: int | None = None) -> None:
        self.max_concurrent = max_concurrent
        self.per_minute = per_minute
        self.max_held = max_held
        self._clock = clock
        self._usage: dict[str, _Usage] = {}  # one entry per principal: bounded by the configured keys

    def acquire(self, principal: str) -> LimitExceeded | None:
        """Take a slot for one call, or say why not; a taken slot must be given back with ``release``."""
        now = self._clock()
        usage = self._usage.get(principal)
        if usage is None:
            usage = self._usage[principal] = _Usage(0, float(self.per_minute or 0), now)
        if self.max_concurrent is not None and usage.running >= self.max_concurrent:
            return LimitExceeded(f"Too many calls at once: this key may have {self.max_concurrent} calls running."
                                 " Wait for one to finish, then try again.", 1)
        if self.per_minute is not None:
            rate = self.per_minute / 60.0
            usage.tokens = min(float(self.per_minute), usage.tokens + (now - usage.updated) * rate)
            usage.updated = now
            if usage.tokens < 1.0:
                wait = math.ceil((1.0 - usage.tokens) / rate)
                return LimitExceeded(f"Too many calls: this key may make {self.per_minute} calls a minute."
                                     f" Try again in {wait} s.", wait)
            usage.tokens -= 1.0
        usage.running += 1
        return None

    def release(self, principal: str) -> None:
        """Give back the slot ``acquire`` took."""
        usage = self._usage.get(principal)
        if usage is not None and usage.running > 0:
            usage.running -= 1

    def hold(self, principal: str) -> bool:
        """Take one of the principal's held-call slots (a running call's, so ``acquire`` came first);
        False when they are all taken. A taken one must be given back with ``unhold``."""
        usage = self._usage.get(principal)
        if usage is None or (self.max_held is not None and usage.held >= self.max_held):
            return False
        usage.held += 1
        return True

    def unhold(self, principal: str) -> None:
        """Give back the held-call slot ``hold`` took."""
        usage = self._usage.get(principal)
        if usage is not None and usage.held > 0:
            usage.held -= 1
