"""Implicit runs: the run a call belongs to when the client names none, one per (principal, client).

A client that sends no run id (no ``X-Gateway-Session``, no ``_meta["gateway/session"]``, no MCP
session) still makes runs: its calls go to the current implicit run of its (principal, client),
which ends once ``runs.idle_timeout`` passes without a call. The next call then starts a new run
with fresh counters, so a run that a budget terminated never locks the key for good. The current
run of each pair and its last call's time are persisted (table ``implicit_runs``) by the store.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gateway.limits import MAX_CACHED_SESSIONS

__all__ = ["ImplicitRuns", "new_run_id"]

# (principal, client, run id, last call at) for the store to write behind.
Changed = Callable[[str, str, str, float], None]
# The persisted (run id, last call at) of a pair, if any.
Loader = Callable[[str, str], tuple[str, float] | None]


def new_run_id() -> str:
    """A fresh implicit run's id."""
    return f"implicit-{uuid.uuid4().hex[:16]}"


@dataclass(slots=True)
class _Current:
    run_id: str
    last_call: float


class _Unread:
    """``run_for``'s default: the stored row has not been read."""


_UNREAD = _Unread()


class ImplicitRuns:
    """The current implicit run of each (principal, client)."""

    def __init__(self, idle_timeout: float, changed: Changed, load: Loader,
                 clock: Callable[[], float] = time.time) -> None:
        self.idle_timeout = idle_timeout
        self._changed = changed
        self._load = load
        self._clock = clock
        self._current: dict[tuple[str, str], _Current] = {}

    def cached(self, principal: str, client: str) -> bool:
        """Whether the pair's run is known here (else ``run_for``'s first look reads the store)."""
        return (principal, client) in self._current

    def run_for(self, principal: str, client: str, stored: tuple[str, float] | _Unread | None = _UNREAD) -> str:
        """The run this call belongs to: the pair's current one, or a new one after ``idle_timeout``.

        ``stored``: the pair's stored row, already read off the event loop (``SessionStore.implicit_run``);
        unread, a pair not cached here is read now (a blocking read).
        """
        key = (principal, client)
        now = self._clock()
        current = self._current.get(key)
        if current is None:
            if isinstance(stored, _Unread):
                stored = self._load(principal, client)
            current = _Current(*stored) if stored is not None else None
        if current is None or now - current.last_call > self.idle_timeout:
            current = _Current(new_run_id(), now)
        current.last_call = now
        if key not in self._current and len(self._current) >= MAX_CACHED_SESSIONS:
            self._current.pop(next(iter(self._current)))
        self._current[key] = current
        self._changed(principal, client, current.run_id, now)
        return current.run_id

    def end(self, principal: str, run_id: str) -> bool:
        """Forget ``run_id`` as its pair's current run (its next call starts a new one); whether it was current."""
        ended = False
        for (who, client), current in list(self._current.items()):
            if who == principal and current.run_id == run_id:
                self._current[(who, client)] = _Current(current.run_id, float("-inf"))
                self._changed(who, client, current.run_id, 0.0)  # idle since the epoch: over on next look
                ended = True
        return ended
