"""Window tallies from their rows (gateway/store/window_tallies.py): sums of the buckets inside a window, and
distinct values by their last use."""

from __future__ import annotations

from gateway.core.limits import MAX_SEEN_VALUES
from gateway.policy.flow import TallyChange
from gateway.store.window_tallies import WindowTallies

WINDOWS = {"hour": 60, "day": 1440}


def test_a_window_sums_its_buckets_and_counts_the_values_last_used_inside_it() -> None:
    rows = WindowTallies(sums=[(1000, "sent", 100.0), (1000, "sent", 50.0), (1990, "sent", 25.0)],
                         seen=[("to", "old@x", 1000), ("to", "new@x", 1995)])
    rows.add(TallyChange(sums={"sent": 5.0}, distinct={"to": ("new@x", "other@x")}), 2000)
    view = rows.view(WINDOWS, 2000)
    assert (view["hour"].values, view["hour"].seen) == ({"sent": 30.0, "to": 2}, {"to": ["new@x", "other@x"]})
    assert (view["day"].values, view["day"].seen) == (
        {"sent": 180.0, "to": 3}, {"to": ["old@x", "new@x", "other@x"]})
    rows.add(TallyChange(distinct={"to": ("old@x",)}), 2001)  # used again: inside the hour now, still one value
    assert rows.view(WINDOWS, 2001)["hour"].values["to"] == 3
    assert rows.view(WINDOWS, 2001)["day"].values["to"] == 3


def test_expired_rows_are_forgotten_and_a_window_shows_the_most_recent_values() -> None:
    rows = WindowTallies(sums=[(10, "sent", 1.0), (500, "sent", 2.0)],
                         seen=[("to", f"v{n}", 500 + n // 100) for n in range(MAX_SEEN_VALUES + 5)])
    rows.expire(10)
    assert list(rows.sums) == [(500, "sent")]
    view = rows.view({"day": 1440}, 600)["day"]
    assert view.values == {"sent": 2.0, "to": MAX_SEEN_VALUES + 5}  # the count is exact
    assert len(view.seen["to"]) == MAX_SEEN_VALUES and "v1004" in view.seen["to"]  # the newest are shown
