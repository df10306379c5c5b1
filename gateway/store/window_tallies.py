"""A principal's tallies over its usage windows, kept as the rows the store holds (gateway/store/flow_schema.py).

Sums are kept per minute bucket and tally; a distinct tally keeps each value with the last minute a call used
it. A window of ``m`` minutes ending at minute ``now`` holds the buckets after ``now - m``: its sum adds their
amounts, its distinct count is the values last used inside it, and it shows (``usage.WINDOW.seen``) the most
recently used ``MAX_SEEN_VALUES`` of them, oldest first. Every value is stored, so the count is exact; one
not shown counts as new to a rule that looks for it (a cap errs on the strict side).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.core.limits import MAX_SEEN_VALUES
from gateway.policy.flow import Tallies, TallyChange

__all__ = ["WindowTallies"]


class WindowTallies:
    """One principal's window tallies: amounts by (minute, tally), and by tally each value's last minute."""

    def __init__(self, sums: Iterable[tuple[int, str, float]] = (),
                 seen: Iterable[tuple[str, str, int]] = ()) -> None:
        self.sums: dict[tuple[int, str], float] = {}
        self.seen: dict[str, dict[str, int]] = {}
        for minute, tally, amount in sums:
            self.sums[(int(minute), str(tally))] = self.sums.get((int(minute), str(tally)), 0.0) + float(amount)
        for tally, value, minute in seen:
            values = self.seen.setdefault(str(tally), {})
            values[str(value)] = max(int(minute), values.get(str(value), int(minute)))

    def copy(self) -> WindowTallies:
        """A copy that shares nothing with these rows."""
        out = WindowTallies()
        out.sums, out.seen = dict(self.sums), {tally: dict(values) for tally, values in self.seen.items()}
        return out

    def add(self, change: TallyChange, minute: int) -> None:
        """Count an admitted call's change in ``minute``."""
        for tally, amount in change.sums.items():
            self.sums[(minute, tally)] = self.sums.get((minute, tally), 0.0) + float(amount)
        for tally, values in change.distinct.items():
            kept = self.seen.setdefault(tally, {})
            for value in values:
                kept[value] = minute

    def expire(self, oldest: int) -> None:
        """Forget the buckets and values no window holds any more (minute ``oldest`` and before)."""
        for key in [k for k in self.sums if k[0] <= oldest]:
            del self.sums[key]
        for values in self.seen.values():
            for value in [v for v, minute in values.items() if minute <= oldest]:
                del values[value]

    def view(self, windows: Mapping[str, int], now: int) -> dict[str, Tallies]:
        """Each window's tallies at minute ``now`` (``windows``: name to length in minutes)."""
        out: dict[str, Tallies] = {}
        for name, minutes in windows.items():
            after = now - minutes
            tallies = Tallies()
            for (minute, tally), amount in self.sums.items():
                tallies.values[tally] = float(tallies.values.get(tally, 0.0)) + (amount if minute > after else 0.0)
            for tally, values in self.seen.items():
                inside = sorted((minute, value) for value, minute in values.items() if minute > after)
                tallies.values[tally] = len(inside)
                tallies.seen[tally] = [value for _, value in inside[-MAX_SEEN_VALUES:]]
            out[name] = tallies
        return out
