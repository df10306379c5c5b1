"""Admissions across two processes sharing one database (a SQLite file, a PostgreSQL database): 200 racing calls
of 100 under a cap of 1,000, half from each process, admit exactly ten, whether they share one run (the run's
row lock) or each has its own (the principal's lock row and its window tallies)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.store.postgres import PostgresStore
from gateway.store.sql import SqlStore
from gateway.store.sqlite import SqliteStore

DAY = {"day": 86400.0}

# One process's half of the race: open the store, make its runs, say "ready", wait for "go" on stdin, then 100
# admissions at once; print how many were admitted, refused, and failed.
RACER = r"""
import asyncio, json, sys, time
from gateway.policy.flow import TallyChange

def judge(view):
    time.sleep(0.002)  # deciding takes a moment, as evaluating a policy does: a lock that did not hold would show
    totals = [view.run.values.get("sent", 0.0)] + [w.values.get("sent", 0.0) for w in view.windows.values()]
    if max(totals) + 100 > 1000:
        return False, None
    return True, TallyChange(sums={"sent": 100.0})

async def main(kind, where, runs, name):
    windows = {"day": 86400.0}
    if kind == "postgres":
        from gateway.store.postgres import PostgresStore
        store = PostgresStore(where, usage_windows=windows)
    else:
        from gateway.store.sqlite import SqliteStore
        store = SqliteStore(where, write_through=True, usage_windows=windows)
    try:
        states = [await store.session("alice", "run" if runs == "one" else f"run-{name}-{n}") for n in range(100)]
        print("ready", flush=True)
        sys.stdin.readline()
        got = await asyncio.gather(*(store.admit(s, judge) for s in states), return_exceptions=True)
        print(json.dumps({"admitted": got.count(True), "refused": got.count(False),
                          "failed": [repr(g) for g in got if not isinstance(g, bool)]}), flush=True)
    finally:
        store.close()

asyncio.run(main(*sys.argv[1:]))
"""


def _race(kind: str, where: str, runs: str) -> list[dict[str, Any]]:
    tree = str(Path(__file__).parents[2])  # this checkout's gateway, whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, kind, where, runs, name], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
              for name in ("a", "b")]
    try:
        for racer in racers:  # both have their runs and connections before either starts
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready", racer.communicate()[1]
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        outputs = [racer.communicate(timeout=120) for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()
    assert [r.returncode for r in racers] == [0, 0], [err for _, err in outputs]
    return [json.loads(out) for out, _ in outputs]


@pytest.mark.parametrize("runs", ["one", "many"])
async def test_two_processes_racing_a_cap_admit_exactly_ten(backend: str, runs: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    where = request.getfixturevalue("postgres_dsn") if backend == "postgres" else str(tmp_path / "shared.sqlite3")
    store: SqlStore = PostgresStore(where, usage_windows=DAY) if backend == "postgres" \
        else SqliteStore(where, write_through=True, usage_windows=DAY)  # migrated before both open it
    try:
        halves = _race(backend, where, runs)
        assert [h["failed"] for h in halves] == [[], []]
        assert sum(h["admitted"] for h in halves) == 10
        assert sum(h["refused"] for h in halves) == 190
        assert (await store.window_tallies("alice"))["day"].values == {"sent": 1000.0}
        if runs == "one":
            assert (await store.session("alice", "run")).tallies.values == {"sent": 1000.0}
    finally:
        store.close()
