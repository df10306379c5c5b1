"""Per-principal usage over rolling windows (``usage.<window>`` in CEL), counted in one-minute buckets.

A principal's calls are counted in the bucket of the minute they were made, by tool, with the
rejected ones beside them. Each configured window (``usage_windows: {hour: 1h, day: 24h}``) keeps a
running total of the buckets inside it and subtracts a bucket when it falls out, so reading or
counting costs the buckets that expired since the last call, never a scan of the window. The
buckets are persisted (table ``usage``) by the store, so a restart keeps the totals.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gateway.core.limits import MAX_CACHED_SESSIONS, USAGE_BUCKET_SECONDS

__all__ = ["Totals", "UsageCounter"]


@dataclass(slots=True)
class Totals:
    """Calls, calls by tool and rejected calls: one bucket's, or one window's running total."""

    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    rejected_by_tool: dict[str, int] = field(default_factory=dict)  # what a bucket row holds per tool

    def add(self, other: Totals, sign: int = 1) -> None:
        """Add (or with ``sign=-1`` subtract) another total into this one."""
        self.calls += sign * other.calls
        self.rejected += sign * other.rejected
        pairs = ((self.calls_by_tool, other.calls_by_tool), (self.rejected_by_tool, other.rejected_by_tool))
        for mine, theirs in pairs:
            for tool, n in theirs.items():
                left = mine.get(tool, 0) + sign * n
                if left:
                    mine[tool] = left
                else:
                    mine.pop(tool, None)


# A bucket changed: (principal, minute, tool, calls added, rejected added) for the store to add to its row.
Changed = Callable[[str, int, str, int, int], None]
# The buckets of a principal newer than a minute, from the database: (minute, tool, calls, rejected) rows.
Loader = Callable[[str, int], Iterable[tuple[int, str, int, int]]]


class _Principal:
    """One principal's buckets and one running total per window."""

    def __init__(self, windows: Mapping[str, int]) -> None:
        self.buckets: dict[int, Totals] = {}  # minute -> counts
        self.totals = {name: Totals() for name in windows}
        self.inside: dict[str, deque[int]] = {name: deque() for name in windows}  # minutes in each total


def window_minutes(windows: Mapping[str, float]) -> dict[str, int]:
    """The usage windows (name to seconds, as configured) in whole minute buckets, at least one each."""
    return {name: max(1, round(seconds / USAGE_BUCKET_SECONDS)) for name, seconds in windows.items()}


class UsageCounter:
    """Rolling per-principal counters over named windows (in whole minutes)."""

    def __init__(self, windows: Mapping[str, float], changed: Changed, load: Loader,
                 clock: Callable[[], float] = time.time) -> None:
        self.windows = window_minutes(windows)
        self.longest = max(self.windows.values(), default=0)
        self._changed = changed
        self._load = load
        self._clock = clock
        self._principals: dict[str, _Principal] = {}

    def _minute(self) -> int:
        return int(self._clock() // USAGE_BUCKET_SECONDS)

    def _of(self, principal: str, now: int) -> _Principal:
        found = self._principals.get(principal)
        if found is None:
            found = self.replace(principal, self._load(principal, now - self.longest))
        self._expire(found, now)
        return found

    def replace(self, principal: str, rows: Iterable[tuple[int, str, int, int]]) -> _Principal:
        """Start the principal's totals afresh from bucket rows (minute, tool, calls, rejected): what the
        database holds, with every process's counts, plus this process's not yet written."""
        found = _Principal(self.windows)
        for minute, tool, calls, rejected in rows:
            bucket = found.buckets.setdefault(minute, Totals())
            bucket.add(Totals(calls, {tool: calls} if calls else {}, rejected, {tool: rejected} if rejected else {}))
        for minute in sorted(found.buckets):
            for name in self.windows:
                found.inside[name].append(minute)
                found.totals[name].add(found.buckets[minute])
        if principal not in self._principals and len(self._principals) >= MAX_CACHED_SESSIONS:
            self._principals.pop(next(iter(self._principals)))
        self._principals[principal] = found
        return found

    def oldest_kept(self) -> int:
        """The newest minute no window holds any more: rows after it are the ones that count."""
        return self._minute() - self.longest

    def _expire(self, state: _Principal, now: int) -> None:
        """Take out of each window's total the buckets that have left it."""
        for name, minutes in self.windows.items():
            inside = state.inside[name]
            while inside and inside[0] <= now - minutes:
                state.totals[name].add(state.buckets[inside.popleft()], -1)
        for minute in [m for m in state.buckets if m <= now - self.longest]:
            del state.buckets[minute]

    def _bump(self, principal: str, tool: str, calls: int, rejected: int) -> None:
        if not self.windows:
            return
        now = self._minute()
        state = self._of(principal, now)
        bucket = state.buckets.get(now)
        if bucket is None:
            bucket = state.buckets[now] = Totals()
            for name in self.windows:
                state.inside[name].append(now)
        one = Totals(calls, {tool: calls} if calls else {}, rejected, {tool: rejected} if rejected else {})
        bucket.add(one)
        for total in state.totals.values():
            total.add(one)
        self._changed(principal, now, tool, calls, rejected)

    def count_call(self, principal: str, tool: str) -> None:
        """Count one call of ``tool`` now."""
        self._bump(principal, tool, 1, 0)

    def count_rejected(self, principal: str, tool: str) -> None:
        """Count one refused call of ``tool`` now."""
        self._bump(principal, tool, 0, 1)

    def snapshot(self, principal: str) -> dict[str, Totals]:
        """Each window's totals for the principal now (copies)."""
        if not self.windows:
            return {}
        state = self._of(principal, self._minute())
        return {name: Totals(t.calls, dict(t.calls_by_tool), t.rejected) for name, t in state.totals.items()}
