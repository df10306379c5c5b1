"""A run's labels and history in the store, on SQLite and PostgreSQL: changed in memory at once, written behind
as part of the session's delta (labels merged, history appended), read back by other processes and after a
restart, cleared by a reset."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import Opener

from gateway.core.limits import MAX_RUN_LABELS, RUN_HISTORY_KEPT
from gateway.policy.flow import LabelOverflow, history_entry
from gateway.store.sqlite import SqliteStore


def entry(tool: str, labels: tuple[str, ...] = ()) -> dict[str, object]:
    return history_entry(tool, "allow", None, labels, "2026-12-02T10:00:00.000Z")


async def test_labels_and_history_are_seen_by_another_store_once_written(open_store: Opener) -> None:
    here, there = open_store(), open_store()
    state = await here.session("alice", "run")
    here.count_call(state, "web_fetch")
    here.add_labels(state, ["untrusted", "web"])
    here.add_labels(state, ["untrusted"])  # once each
    here.add_history(state, entry("web_fetch", ("untrusted", "web")))
    assert (state.labels, [h["tool"] for h in state.history]) == (["untrusted", "web"], ["web_fetch"])  # at once
    await here.settle()
    theirs = await there.session("alice", "run")
    assert (theirs.labels, theirs.history, theirs.calls) == (["untrusted", "web"], state.history, 1)
    assert theirs.to_dict()["labels"] == ["untrusted", "web"] and theirs.to_dict()["history"][0]["tool"] == "web_fetch"


async def test_two_stores_adding_to_one_run_merge_labels_and_append_history(open_store: Opener) -> None:
    one, two = open_store(), open_store()
    a, b = await one.session("alice", "run"), await two.session("alice", "run")
    one.add_labels(a, ["secret"])
    one.add_history(a, entry("vault_read"))
    await one.settle()
    two.add_labels(b, ["untrusted", "secret"])  # b had not read a's labels
    two.add_history(b, entry("web_fetch"))
    assert b.labels == ["untrusted", "secret"]
    await two.settle()
    seen = await open_store().session("alice", "run")
    assert seen.labels == ["secret", "untrusted"]
    assert [h["tool"] for h in seen.history] == ["vault_read", "web_fetch"]
    assert (await one.session("alice", "run")).labels == ["secret", "untrusted"]  # each store's view is the row's


async def test_history_keeps_the_newest_entries(open_store: Opener) -> None:
    store = open_store()
    state = await store.session("alice", "run")
    for n in range(RUN_HISTORY_KEPT + 6):
        store.add_history(state, entry(f"tool_{n}"))
        if n % 20 == 0:
            await store.settle()  # several writes, each appending to what is stored
    await store.settle()
    kept = (await open_store().session("alice", "run")).history
    assert [h["tool"] for h in kept] == [f"tool_{n}" for n in range(6, RUN_HISTORY_KEPT + 6)]


async def test_labels_past_the_cap_are_refused_and_nothing_is_added(open_store: Opener) -> None:
    store = open_store()
    state = await store.session("alice", "run")
    store.add_labels(state, [f"l{n}" for n in range(MAX_RUN_LABELS)])
    with pytest.raises(LabelOverflow):
        store.add_labels(state, ["untrusted", "one-more"])
    assert len(state.labels) == MAX_RUN_LABELS and "untrusted" not in state.labels
    store.add_labels(state, ["l0"])  # one it has: nothing new, no overflow
    await store.settle()
    assert len((await open_store().session("alice", "run")).labels) == MAX_RUN_LABELS


async def test_a_reset_clears_labels_and_history(open_store: Opener) -> None:
    one, two = open_store(), open_store()
    state = await one.session("alice", "run")
    one.add_labels(state, ["untrusted"])
    one.add_history(state, entry("web_fetch"))
    await one.settle()
    theirs = await two.session("alice", "run")
    two.reset(theirs)
    assert (theirs.labels, theirs.history) == ([], [])
    two.add_labels(theirs, ["after"])  # added after the reset: kept
    await two.settle()
    again = await one.session("alice", "run")
    assert (again.labels, again.history) == (["after"], [])


async def test_a_restart_keeps_labels_history_and_tallies(tmp_path: Path) -> None:
    from gateway.policy.flow import TallyChange
    store = SqliteStore(tmp_path / "s.db")  # this process alone: written behind
    try:
        state = await store.session("alice", "run")
        store.add_labels(state, ["untrusted"])
        store.add_history(state, entry("web_fetch", ("untrusted",)))
        await store.admit(state, lambda view: (None, TallyChange(sums={"sent": 7.5})))
        assert (await store.session("alice", "run")) is state
    finally:
        store.close()  # writes what is queued
    again = SqliteStore(tmp_path / "s.db")
    try:
        state = await again.session("alice", "run")
        assert (state.labels, state.history[0]["labels"], state.tallies.values) == (
            ["untrusted"], ["untrusted"], {"sent": 7.5})
    finally:
        again.close()
