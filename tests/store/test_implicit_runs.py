"""Implicit runs and protocol sessions (gateway/store/implicit_runs.py, docs/runs.md "Implicit runs").

A protocol session is a transport detail: sessions that carry one call each (LangChain's MCP adapters,
the Inspector CLI) make one run; a session that carries a second call owns its run, so the next session
of the same client starts a new one. Real ``ImplicitRuns`` over a real SQLite store, a settable clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.store.implicit_runs import ImplicitRuns
from gateway.store.sqlite import SqliteStore

CLIENT = "mcp/0.1.0; python-httpx2/2.16.2"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def runs(tmp_path: Path):
    store = SqliteStore(tmp_path / "g.sqlite3")
    clock = Clock()
    yield ImplicitRuns(600, store.sql_usage.run_changed, store.sql_usage.run_row, clock), clock
    store.close()


def test_sessions_of_one_call_each_share_one_run(runs) -> None:
    implicit, _clock = runs
    seen = {implicit.run_for("alice", CLIENT, session=f"per-call-{i}") for i in range(7)}
    assert len(seen) == 1  # a per-run budget counts all seven calls
    assert implicit.run_for("alice", CLIENT) in seen  # a sessionless call of that client joins it too


def test_a_session_that_carries_a_second_call_owns_its_run_and_the_next_session_starts_a_new_one(runs) -> None:
    implicit, _clock = runs
    first = [implicit.run_for("alice", CLIENT, session="s1") for _ in range(3)]
    second = [implicit.run_for("alice", CLIENT, session="s2") for _ in range(3)]
    assert len(set(first)) == 1 and len(set(second)) == 1
    assert first[0] != second[0]


def test_two_long_sessions_that_started_together_part_at_the_second_call(runs) -> None:
    implicit, _clock = runs
    a1, b1 = implicit.run_for("alice", CLIENT, session="a"), implicit.run_for("alice", CLIENT, session="b")
    assert a1 == b1  # one call each: nothing yet tells them from per-call sessions
    a2, b2 = implicit.run_for("alice", CLIENT, session="a"), implicit.run_for("alice", CLIENT, session="b")
    assert a2 == a1 and b2 != a1  # a owns the run; b moves to one of its own
    assert implicit.run_for("alice", CLIENT, session="b") == b2
    assert implicit.run_for("alice", CLIENT, session="a") == a1


def test_sessions_of_another_principal_or_client_never_join(runs) -> None:
    implicit, _clock = runs
    mine = implicit.run_for("alice", CLIENT, session="s")
    assert implicit.run_for("bob", CLIENT, session="s") != mine
    assert implicit.run_for("alice", "other/1", session="t") != mine


def test_ending_a_run_starts_a_new_one_for_its_sessions_and_the_next(runs) -> None:
    implicit, _clock = runs
    owned = implicit.run_for("alice", CLIENT, session="s1")
    assert implicit.run_for("alice", CLIENT, session="s1") == owned  # its second call: it owns the run
    assert implicit.end("alice", owned) is True
    after = implicit.run_for("alice", CLIENT, session="s1")
    assert after != owned
    per_call = implicit.run_for("alice", CLIENT, session="p1")
    implicit.end("alice", per_call)
    assert implicit.run_for("alice", CLIENT, session="p2") != per_call


def test_a_session_idle_past_the_timeout_starts_a_new_run(runs) -> None:
    implicit, clock = runs
    before = implicit.run_for("alice", CLIENT, session="s1")
    assert implicit.run_for("alice", CLIENT, session="s1") == before
    clock.now += 601
    assert implicit.run_for("alice", CLIENT, session="s1") != before
