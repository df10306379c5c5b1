"""What a run carries between calls (gateway/policy/flow.py): labels only accumulate, tallies add up and count
distinct values past what they keep, the history keeps the newest calls; every bound is a named limit."""

from __future__ import annotations

import pytest

from gateway.core.limits import MAX_RUN_LABELS, MAX_SEEN_VALUE_CHARS, MAX_SEEN_VALUES, RUN_HISTORY_KEPT
from gateway.policy.flow import (
    LabelOverflow,
    Tallies,
    TallyChange,
    appended_history,
    history_entry,
    merged_labels,
    seen_value,
)


def test_labels_merge_in_order_once_each():
    assert merged_labels(["a"], ["b", "a", "c", "b"]) == ["a", "b", "c"]
    labels = ["x"]
    assert merged_labels(labels, []) == ["x"] and labels == ["x"]  # a new list; the given one is kept


def test_a_run_past_its_label_limit_fails_closed():
    full = [f"l{i}" for i in range(MAX_RUN_LABELS)]
    assert merged_labels(full, ["l0"]) == full  # nothing new: still fine
    with pytest.raises(LabelOverflow):
        merged_labels(full, ["one-more"])


def test_sums_add_and_distinct_values_count_once():
    change = TallyChange({"spent": 100.0}, {"people": ("a", "b", "a")})
    once = Tallies().added(change)
    assert once.values == {"spent": 100.0, "people": 2} and once.seen == {"people": ["a", "b"]}
    twice = once.added(TallyChange({"spent": 50}, {"people": ("b", "c")}))
    assert twice.values == {"spent": 150.0, "people": 3} and twice.seen["people"] == ["a", "b", "c"]
    assert once.values == {"spent": 100.0, "people": 2}  # added gives a new object


def test_a_distinct_count_goes_on_past_the_values_kept():
    full = Tallies({"people": MAX_SEEN_VALUES}, {"people": [f"p{i}" for i in range(MAX_SEEN_VALUES)]})
    after = full.added(TallyChange({}, {"people": ("new",)})).added(TallyChange({}, {"people": ("new",)}))
    # a value not kept counts as new each time: a cap errs on the strict side
    assert after.values["people"] == MAX_SEEN_VALUES + 2 and len(after.seen["people"]) == MAX_SEEN_VALUES


def test_zeros_fill_in_what_a_run_has_not_counted_yet():
    zero = Tallies({"spent": 0.0, "people": 0}, {"people": []})
    assert Tallies({"spent": 5.0}).with_zeros(zero).values == {"spent": 5.0, "people": 0}
    assert Tallies().with_zeros(Tallies()).values == {}


def test_tallies_round_trip_through_json_and_junk_reads_as_empty():
    tallies = Tallies({"spent": 1.5, "people": 2}, {"people": ["a", "b"]})
    back = Tallies.from_json(tallies.to_json())
    assert (back.values, back.seen) == (tallies.values, tallies.seen)
    assert Tallies.from_json(None).values == {} and Tallies.from_json({"values": 3}).values == {}
    assert Tallies.from_json({"values": {"a": True, "b": "x", "c": 2}}).values == {"c": 2}
    assert TallyChange({"a": 1.0}, {"b": ("x",)}).to_json() == {"sums": {"a": 1.0}, "distinct": {"b": ["x"]}}
    assert TallyChange().empty and not TallyChange({"a": 0.0}).empty


def test_a_long_distinct_value_is_kept_as_its_digest():
    short = "x" * MAX_SEEN_VALUE_CHARS
    assert seen_value(short) == short
    long = seen_value(short + "y")
    assert long.startswith("sha256:") and len(long) == 7 + 64 and long == seen_value(short + "y")
    assert seen_value("\ud800" * (MAX_SEEN_VALUE_CHARS + 1)).startswith("sha256:")  # a lone surrogate too


def test_the_history_keeps_the_newest_calls_without_arguments():
    entry = history_entry("mail_read", "allow", None, ["untrusted"], "2026-01-01T00:00:00Z")
    assert entry == {"tool": "mail_read", "verdict": "allow", "rule": "", "labels": ["untrusted"],
                     "time": "2026-01-01T00:00:00Z"}
    history: list[dict[str, object]] = []
    for i in range(RUN_HISTORY_KEPT + 3):
        history = appended_history(history, history_entry(f"t{i}", "allow", "p/r", [], ""))
    assert len(history) == RUN_HISTORY_KEPT
    assert history[0]["tool"] == "t3" and history[-1]["tool"] == f"t{RUN_HISTORY_KEPT + 2}"
