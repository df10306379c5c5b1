"""Replay's usage windows: each principal's window tallies rebuilt under the new policy set, call by call.

The gateway keeps a principal's tallies per minute bucket (gateway/store/window_tallies.py) and shows each usage
window the buckets inside it. Replay keeps the same rows per principal, across all of its runs, in log order (the
order the outcomes were written): a call is decided on the windows at its ``context.call_time``, and an admitted
call's change is added in the minute it was admitted (its call time; an approved call's, when it was released: the
event's time). The window lengths are the config's ``usage_windows`` (``gateway replay --config``); without them
the windows' tallies are replayed as logged.

A log that starts mid-window starts from what the principal's first event logged for each window
(``context.usage.W.tallies``, the tallies the new set declares), an opening balance kept until the window has
moved past that event entirely: the strict side, as the store's own bounded ``seen`` errs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.core.clock import parse_rfc3339
from gateway.core.limits import MAX_SEEN_VALUES, USAGE_BUCKET_SECONDS
from gateway.policy.call import ToolCall, UsageInfo
from gateway.policy.flow import Tallies, TallyChange
from gateway.store.window_tallies import WindowTallies

__all__ = ["WindowFolder", "minute_of"]


def minute_of(time: Any) -> int | None:
    """The usage bucket (minute) of an RFC 3339 time; None when it is not one."""
    try:
        return int(parse_rfc3339(str(time)) // USAGE_BUCKET_SECONDS)
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class _Principal:
    """One principal's rows, and the opening balance per window of a log that starts mid-window."""

    start: int
    rows: WindowTallies = field(default_factory=WindowTallies)
    opening: dict[str, Tallies] = field(default_factory=dict)


class WindowFolder:
    """The principals of one replay: the window tallies each call reads, and what admitted calls add."""

    def __init__(self, windows: Mapping[str, int], tally_ids: list[str], zero: Tallies) -> None:
        self.windows = dict(windows)  # name to minutes
        self._ids = set(tally_ids)
        self._zero = zero
        self._principals: dict[str, _Principal] = {}

    def with_usage(self, principal: str, call: ToolCall, logged: Mapping[str, Any]) -> ToolCall:
        """``call`` reading the principal's windows as the new set leaves them at the call's time (the counts as
        logged: calls and rejections are not the policies' to change)."""
        if not self.windows:
            return call
        now = minute_of(call.call.time)
        if now is None:  # no time to place it in a window: the windows as logged
            return call
        state = self._principal(principal, now, logged)
        view = state.rows.view(self.windows, now)
        usage = dict(call.usage)
        for name, minutes in self.windows.items():
            tallies = view[name]
            if name in state.opening and now - minutes < state.start:  # the window still covers the log's start
                tallies = _plus(tallies, state.opening[name])
            tallies = tallies.with_zeros(self._zero)
            counts = usage.get(name) or UsageInfo()
            usage[name] = replace(counts, tallies=dict(tallies.values),
                                  seen={k: list(v) for k, v in tallies.seen.items()})
        return replace(call, usage=usage)

    def add(self, principal: str, change: TallyChange, time: Any) -> None:
        """Count an admitted call's ``change`` in the minute of ``time`` (a call without one is not placed)."""
        minute = minute_of(time)
        state = self._principals.get(principal)
        if minute is None or state is None or change.empty:
            return
        state.rows.add(change, minute)

    def _principal(self, principal: str, now: int, logged: Mapping[str, Any]) -> _Principal:
        state = self._principals.get(principal)
        if state is None:
            state = self._principals[principal] = _Principal(now)
            for name in self.windows:
                window = logged.get(name)
                if isinstance(window, dict):
                    state.opening[name] = _logged_tallies(window, self._ids)
        return state


def _logged_tallies(window: Mapping[str, Any], ids: set[str]) -> Tallies:
    """A logged window's tallies (those the new set declares)."""
    values, seen = window.get("tallies"), window.get("seen")
    return Tallies(
        {str(k): v for k, v in values.items() if k in ids and isinstance(v, int | float) and not isinstance(v, bool)}
        if isinstance(values, dict) else {},
        {str(k): [str(x) for x in v] for k, v in seen.items() if k in ids and isinstance(v, list)}
        if isinstance(seen, dict) else {})


def _plus(tallies: Tallies, opening: Tallies) -> Tallies:
    """A window's tallies with the opening balance: sums added; a distinct count is the opening's plus the values
    not among the opening's shown ones, and the values shown are the most recent."""
    out = tallies.copy()
    for tally, value in opening.values.items():
        if tally not in opening.seen:
            out.values[tally] = float(out.values.get(tally, 0.0)) + float(value)
    for tally, before in opening.seen.items():
        after = out.seen.get(tally, [])
        new = int(out.values.get(tally, 0)) - len(set(after) & set(before))
        out.values[tally] = int(opening.values.get(tally, len(before))) + new
        out.seen[tally] = [*(v for v in before if v not in after), *after][-MAX_SEEN_VALUES:]
    return out
