"""Implicit runs: the run a call belongs to when the client names none, one per (principal, client).

A client that sends no run id (no ``X-Gateway-Session``, no ``_meta["gateway/session"]``) still makes
runs: its calls go to the current implicit run of its (principal, client), which ends once
``runs.idle_timeout`` passes without a call. The next call then starts a new run with fresh counters,
so a run that a budget terminated never locks the key for good. The current run of each pair and its
last call's time are persisted (table ``implicit_runs``) by the store.

A protocol session (``Mcp-Session-Id``) is a transport detail, not a run: clients that open one per
call or per invocation (LangChain's MCP adapters, the MCP Inspector CLI) make one run of many sessions.
But a session that carries a second call shows a client that keeps one session for a whole run (the
MCP SDKs' ``Client``, the Inspector's UI); such a session **owns** its run, and a later session of the
same (principal, client) starts a run of its own instead of joining it. A session that shares a run
another session owns moves to a run of its own at its second call. Which session owns which run is
kept in memory only (a restart ends every protocol session anyway).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gateway.core.limits import MAX_CACHED_SESSIONS, MAX_TRACKED_PROTOCOL_SESSIONS

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


@dataclass(slots=True)
class _Bound:
    """The run a protocol session's calls go to, and how many it carried."""

    run_id: str
    calls: int
    last_call: float


_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(cache: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Put ``value`` in ``cache`` as its newest entry, dropping the oldest past ``MAX_TRACKED_PROTOCOL_SESSIONS``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > MAX_TRACKED_PROTOCOL_SESSIONS:
        cache.popitem(last=False)


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
        # (principal, protocol session) -> the run its calls go to; (principal, run id) -> the session that owns it
        self._sessions: OrderedDict[tuple[str, str], _Bound] = OrderedDict()
        self._owners: OrderedDict[tuple[str, str], str] = OrderedDict()

    def cached(self, principal: str, client: str) -> bool:
        """Whether the pair's run is known here (else ``run_for``'s first look reads the store)."""
        return (principal, client) in self._current

    def run_for(self, principal: str, client: str, stored: tuple[str, float] | _Unread | None = _UNREAD,
                session: str | None = None) -> str:
        """The run this call belongs to: the pair's current one, or a new one after ``idle_timeout``.

        ``stored``: the pair's stored row, already read off the event loop (``SessionStore.implicit_run``);
        unread, a pair not cached here is read now (a blocking read). ``session``: the call's protocol
        session (``Mcp-Session-Id``), if any; see the module docstring for what it changes.
        """
        now = self._clock()
        if session is not None and (bound := self._sessions.get((principal, session))) is not None \
                and now - bound.last_call <= self.idle_timeout:
            return self._again(principal, client, session, bound, now)
        key = (principal, client)
        current = self._current.get(key)
        if current is None:
            if isinstance(stored, _Unread):
                stored = self._load(principal, client)
            current = _Current(*stored) if stored is not None else None
        if current is None or now - current.last_call > self.idle_timeout or (
                session is not None and self._owners.get((principal, current.run_id), session) != session):
            current = _Current(new_run_id(), now)  # idle, or another session's own run: a new run
        self._touch(principal, client, current, now)
        if session is not None:
            _keep(self._sessions, (principal, session), _Bound(current.run_id, 1, now))
        return current.run_id

    def _again(self, principal: str, client: str, session: str, bound: _Bound, now: float) -> str:
        """A later call of a protocol session: its run, which it owns from its second call on."""
        bound.calls += 1
        bound.last_call = now
        self._sessions.move_to_end((principal, session))  # the least recently used are forgotten first
        if bound.calls == 2:
            owner = self._owners.get((principal, bound.run_id))
            if owner is not None and owner != session:  # it joined a run another session keeps: one of its own
                bound.run_id = new_run_id()
                self._touch(principal, client, _Current(bound.run_id, now), now)
            _keep(self._owners, (principal, bound.run_id), session)
        current = self._current.get((principal, client))
        if current is not None and current.run_id == bound.run_id:
            self._touch(principal, client, current, now)
        return bound.run_id

    def _touch(self, principal: str, client: str, current: _Current, now: float) -> None:
        """Make ``current`` the pair's current run, called ``now``, and have the store write it behind."""
        key = (principal, client)
        current.last_call = now
        if key not in self._current and len(self._current) >= MAX_CACHED_SESSIONS:
            self._current.pop(next(iter(self._current)))
        self._current[key] = current
        self._changed(principal, client, current.run_id, now)

    def end(self, principal: str, run_id: str) -> bool:
        """Forget ``run_id`` as its pair's current run (its next call starts a new one); whether it was current."""
        ended = False
        for (who, client), current in list(self._current.items()):
            if who == principal and current.run_id == run_id:
                self._current[(who, client)] = _Current(current.run_id, float("-inf"))
                self._changed(who, client, current.run_id, 0.0)  # idle since the epoch: over on next look
                ended = True
        for (who, _session), bound in self._sessions.items():
            if who == principal and bound.run_id == run_id:
                bound.last_call = float("-inf")  # the session's next call is a new run's too
        self._owners.pop((principal, run_id), None)
        return ended
