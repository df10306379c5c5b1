"""Replay rebuilds each principal's window tallies (``usage.W.tallies``) under the new set, across its runs, in log
order, with the config's window lengths (gateway/testing/replay_windows.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flow_support import cap_rule, distinct_tally, policy, sum_tally
from test_replay_runs import changes, event, write_log

from gateway.cli import main
from gateway.testing.replay import read_events, replay

# A per-day spend cap over all of a principal's runs.
DAILY = policy("daily", tallies=[sum_tally(), distinct_tally(tools=["mail_send"])], rules=[
    cap_rule(id="day-cap", window="day", message="At most 1000 USD a day."),
    {"id": "day-recipients", "tools": ["mail_send"], "action": "reject", "message": "At most 2 people a day.",
     "when": "usage.day.tallies.recipients >= 2 && !(args.to in usage.day.seen.recipients)"},
])

DAY = {"day": 24 * 3600.0}


def at(when: str, tool: str, args: dict[str, Any], *, usage: dict[str, Any] | None = None,
       verdict: str = "allow", **fields: Any) -> dict[str, Any]:
    """A call.outcome event at ``when`` (an RFC 3339 time), with the usage windows it logged."""
    recorded = event(0, tool, args, verdict=verdict, **fields)
    recorded["call_id"] = f"c-{when}"
    recorded["time"] = recorded["context"]["call_time"] = when
    recorded["context"]["usage"] = usage or {"day": {"calls": 0, "calls_by_tool": {}, "rejected": 0}}
    return recorded


def transfers(*times: str, principal: str = "alice") -> list[dict[str, Any]]:
    """One 400 USD transfer at each time, each in a run of its own."""
    return [at(t, "payments_transfer", {"amount": 400}, principal=principal, session=f"run-{t}") for t in times]


@pytest.fixture
def daily(load):  # type: ignore[no-untyped-def]
    return load(DAILY)


def test_a_day_cap_refuses_the_call_that_passes_it_across_runs(daily, tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.jsonl", [
        *transfers("2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z"),
        *transfers("2026-01-01T10:30:00Z", principal="bob"),  # another principal: its own day
        *transfers("2026-01-01T11:00:00Z"),  # 800 + 400 in one day, over three runs
    ])
    report = replay(daily, read_events(log), {}, DAY)
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-01T11:00:00Z"]}
    [change] = report.ordered_changes()
    assert (change.now_by, change.examples[0]["message"]) == ("daily/day-cap", "At most 1000 USD a day.")


def test_what_the_day_has_moved_past_no_longer_counts(daily, tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.jsonl", transfers(
        "2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-02T09:30:00Z", "2026-01-02T09:45:00Z"))
    report = replay(daily, read_events(log), {}, DAY)
    # the third is 24½ h after the first: 400 + 400 inside its day; the fourth is the one past the cap
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-02T09:45:00Z"]}


def test_a_refused_call_adds_nothing_to_the_day(daily, tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.jsonl", [
        *transfers("2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"),
        at("2026-01-01T12:00:00Z", "payments_transfer", {"amount": 200}, session="run-4"),  # 800 + 200 fits
    ])
    report = replay(daily, read_events(log), {}, DAY)
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-01T11:00:00Z"]}


def test_distinct_recipients_are_counted_over_the_day(daily, tmp_path: Path) -> None:
    mails = [("2026-01-01T09:00:00Z", "a@x.test"), ("2026-01-01T10:00:00Z", "b@x.test"),
             ("2026-01-01T11:00:00Z", "a@x.test"), ("2026-01-01T12:00:00Z", "c@x.test")]
    log = write_log(tmp_path / "audit.jsonl", [at(t, "mail_send", {"to": to}, session=f"run-{t}") for t, to in mails])
    report = replay(daily, read_events(log), {}, DAY)
    # a third person is refused; writing again to one already written to is not
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-01T12:00:00Z"]}


def test_a_log_starting_mid_day_starts_from_the_logged_day(daily, tmp_path: Path) -> None:
    logged = {"day": {"calls": 2, "calls_by_tool": {}, "rejected": 0, "tallies": {"transferred": 700.0}}}
    log = write_log(tmp_path / "audit.jsonl", [
        at("2026-01-01T09:00:00Z", "payments_transfer", {"amount": 400}, usage=logged),  # 700 + 400
        at("2026-01-01T10:00:00Z", "payments_transfer", {"amount": 300}, session="run-2"),  # 700 + 300 fits
        at("2026-01-02T10:01:00Z", "payments_transfer", {"amount": 900}, session="run-3"),  # both are past
    ])
    report = replay(daily, read_events(log), {}, DAY)
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-01T09:00:00Z"]}


def test_a_log_starting_mid_day_starts_from_the_logged_recipients(daily, tmp_path: Path) -> None:
    logged = {"day": {"calls": 2, "calls_by_tool": {}, "rejected": 0, "tallies": {"recipients": 2},
                      "seen": {"recipients": ["a@x.test", "b@x.test"]}}}
    log = write_log(tmp_path / "audit.jsonl", [
        at("2026-01-01T09:00:00Z", "mail_send", {"to": "a@x.test"}, usage=logged),  # one already written to
        at("2026-01-01T10:00:00Z", "mail_send", {"to": "c@x.test"}, session="run-2"),  # a third person
    ])
    report = replay(daily, read_events(log), {}, DAY)
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-01T10:00:00Z"]}


def test_the_recorded_decisions_replay_unchanged(daily, tmp_path: Path) -> None:
    # recorded under the day cap itself: the third transfer was refused, the next day's allowed
    recorded = transfers("2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z",
                         "2026-01-02T11:30:00Z")
    recorded[2]["verdict"] = recorded[2]["context"]["policy_verdict"] = "reject"
    for e in recorded:
        e["context"]["policy_decided_by"] = "daily/day-cap" if e["verdict"] == "reject" else None
    report = replay(daily, read_events(write_log(tmp_path / "audit.jsonl", recorded)), {}, DAY)
    assert (report.replayed, report.changed, report.unchanged) == (4, 0, 4)


def test_without_window_lengths_the_logged_tallies_are_read(daily, tmp_path: Path) -> None:
    full = {"day": {"calls": 2, "calls_by_tool": {}, "rejected": 0, "tallies": {"transferred": 900.0}}}
    log = write_log(tmp_path / "audit.jsonl", [
        *transfers("2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"),  # logged as 0
        at("2026-01-01T12:00:00Z", "payments_transfer", {"amount": 200}, usage=full, session="run-4"),
    ])
    report = replay(daily, read_events(log), {})
    assert changes(report) == {("decision", "allow", "reject"): ["c-2026-01-01T12:00:00Z"]}


def test_the_cli_takes_the_windows_from_the_config(write, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write("policies/daily.yaml", DAILY)
    config = write("gateway.yaml", """
        policies: [policies]
        usage_windows: {day: 24h}
    """)
    log = write_log(tmp_path / "audit.jsonl", transfers(
        "2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"))
    assert main(["replay", "--audit", str(log), "--config", str(config)]) == 1
    text = capsys.readouterr().out
    assert "1 changed, 0 differ on redacted input, 2 unchanged, in 3 run(s)" in text
    assert "usage windows' tallies rebuilt: day" in text
    assert main(["replay", "--audit", str(log), "--policies", str(config.parent / "policies")]) == 0  # as logged
    assert "usage windows' tallies as logged (pass the gateway's --config to rebuild them)" in capsys.readouterr().out
