"""Rolling usage windows and implicit runs against a clock the test moves, persisted in a real SQLite store."""

from __future__ import annotations

from pathlib import Path

from gateway.store.implicit_runs import ImplicitRuns
from gateway.store.sqlite import SqliteStore
from gateway.store.usage import UsageCounter


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_window_drops_calls_once_their_minute_has_left_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "g.sqlite3", usage_windows={"hour": 3600})
    clock = Clock()
    usage = UsageCounter({"hour": 3600, "ten": 600}, store.sql_usage.changed, store.sql_usage.rows, clock)
    usage.count_call("alice", "search")
    clock.now += 300
    usage.count_call("alice", "search")
    usage.count_call("alice", "fetch")
    usage.count_rejected("alice", "fetch")
    usage.count_call("bob", "search")
    first = usage.snapshot("alice")
    assert (first["hour"].calls, first["hour"].calls_by_tool, first["hour"].rejected) == (
        3, {"search": 2, "fetch": 1}, 1)

    clock.now += 360  # the first call is 11 minutes old: out of `ten`, still in `hour`
    later = usage.snapshot("alice")
    assert (later["ten"].calls, later["ten"].calls_by_tool) == (2, {"search": 1, "fetch": 1})
    assert later["hour"].calls == 3

    clock.now += 3600  # everything is more than an hour old
    gone = usage.snapshot("alice")
    assert (gone["hour"].calls, gone["hour"].calls_by_tool, gone["hour"].rejected) == (0, {}, 0)
    store.close()


def test_the_store_prunes_buckets_older_than_the_longest_window(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "g.sqlite3", usage_windows={"hour": 3600})
    store.sql_usage.changed("alice", 1000, "search", 5, 0)  # minute 1000
    store.sql_usage.changed("alice", 1059, "search", 1, 0)
    store.sql_usage.changed("alice", 1060, "search", 1, 0)  # minute 1000 is an hour old now
    store.close()
    reopened = SqliteStore(tmp_path / "g.sqlite3")
    assert reopened.sql_usage.rows("alice", 0) == [(1059, "search", 1, 0), (1060, "search", 1, 0)]
    reopened.close()


def test_buckets_are_read_back_by_a_new_process(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteStore(tmp_path / "g.sqlite3", usage_windows={"hour": 3600})
    usage = UsageCounter({"hour": 3600}, store.sql_usage.changed, store.sql_usage.rows, clock)
    for _ in range(3):
        usage.count_call("alice", "search")
    clock.now += 120
    usage.count_call("alice", "fetch")
    store.close()  # writes what is queued

    reopened = SqliteStore(tmp_path / "g.sqlite3", usage_windows={"hour": 3600})
    again = UsageCounter({"hour": 3600}, reopened.sql_usage.changed, reopened.sql_usage.rows, clock)
    hour = again.snapshot("alice")["hour"]
    assert (hour.calls, hour.calls_by_tool) == (4, {"search": 3, "fetch": 1})
    clock.now += 3600 - 60  # the first three calls' minute has left the hour; the fetch's has not
    assert again.snapshot("alice")["hour"].calls_by_tool == {"fetch": 1}
    reopened.close()


def test_an_implicit_run_ends_after_the_idle_timeout_and_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteStore(tmp_path / "g.sqlite3")
    runs = ImplicitRuns(600, store.sql_usage.run_changed, store.sql_usage.run_row, clock)
    first = runs.run_for("alice", "mcp/0.1.0")
    clock.now += 599
    assert runs.run_for("alice", "mcp/0.1.0") == first  # activity keeps it going
    assert runs.run_for("alice", "other/1") != first
    assert runs.run_for("bob", "mcp/0.1.0") != first
    store.close()

    reopened = SqliteStore(tmp_path / "g.sqlite3")
    again = ImplicitRuns(600, reopened.sql_usage.run_changed, reopened.sql_usage.run_row, clock)
    clock.now += 500
    assert again.run_for("alice", "mcp/0.1.0") == first
    clock.now += 601
    fresh = again.run_for("alice", "mcp/0.1.0")
    assert fresh != first and fresh.startswith("implicit-")
    assert again.end("alice", fresh) is True
    assert again.run_for("alice", "mcp/0.1.0") not in (first, fresh)
    reopened.close()
