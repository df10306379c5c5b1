"""The operator console's reads with 100,000 decisions in the store, and how soon a call on one replica shows
on another's console.

The store is filled first (the console's own writer, 100,000 call outcomes over six days, 200 runs, five tools,
a tenth of them refused, each with its fired rules), then two ``gateway serve`` processes share it (one SQLite
file, ``store.shared``) and the admin API is timed through HTTP on loopback, as the page reads it:

* the first page of decisions, a filtered page (tool and verdict), a page 50,000 rows deep (by cursor),
  the calls-per-minute chart over a day, a run's timeline (500 calls), the policies view (rule hits), the runs;
* a REST call on replica A, then replica B's decisions polled until it shows: the delay, per call.

It prints p50 / p99 per read and PASS / MISS against issue 24's 300 ms per page and 2 s across replicas.

    python bench/console.py [--events N] [--reps N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.append(str(Path(__file__).resolve().parent))
# bench/ is first on sys.path, where bench/gateway.py would shadow the package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _servers import (
    Processes,
    exit_on_sigterm,
    loadavg,
    new_api_key,
    percentile,
    start_gateway,
    start_upstream,
    work_directory,
    write_gateway_config,
)

from gateway.core.clock import rfc3339_ms
from gateway.pipeline.audit_encode import encode_event
from gateway.store.decisions import DecisionLog
from gateway.store.sqlite import SqliteStore

GOAL_PAGE_MS = 300.0
GOAL_REPLICA_S = 2.0
TOOLS = ("http_echo", "http_search", "http_fetch", "http_send", "http_delete")
POLICY = {"policy": "bench", "rules": [
    {"id": "no-delete", "tools": ["http_delete"], "action": "reject", "message": "No."},
    {"id": "echo", "tools": ["*"], "action": "allow"}]}


def fill(path: Path, events: int) -> None:
    """``events`` call outcomes written by the console's writer, over the last six days."""
    store = SqliteStore(path)
    log = DecisionLog(store.connect_new, store.where, "filler", 7 * 86400.0)
    now = time.time()
    for n in range(events):
        at = now - 6 * 86400 + n * (6 * 86400 / events)
        tool = TOOLS[n % len(TOOLS)]
        refused = tool == "http_delete"
        event = {"event": "call.outcome", "id": f"fill-{n:07d}", "time": rfc3339_ms(at), "call_id": f"c{n}",
                    "principal": {"id": f"agent-{n % 20}", "groups": [], "kind": "key"}, "session": f"run-{n % 200}",
                    "tool": tool, "upstream": "http", "original_args": {"text": f"value {n}"},
                    "final_args": {"text": f"value {n}"}, "verdict": "reject" if refused else "allow",
                    "is_error": refused, "message": "No." if refused else None,
                    "rules": [{"rule": "bench/no-delete" if refused else "bench/echo", "outcome": "fired"}],
                    "decided_by": ["bench/no-delete" if refused else "bench/echo"],
                    "latency": {"policy_us": 20.0, "upstream_ms": 0.5, "total_ms": 1.5}}
        log.record(event, encode_event(event, 65_536, 262_144))
        if n % 5000 == 4999:
            log.flushed(120)
    log.flushed(300)
    log.close()
    store.close()


def timed(client: httpx2.Client, path: str, params: dict[str, Any], reps: int) -> list[float]:
    """Milliseconds per read, ``reps`` times."""
    took = []
    for _ in range(reps):
        started = time.perf_counter()
        answer = client.get(path, params=params)
        took.append((time.perf_counter() - started) * 1e3)
        answer.raise_for_status()
    return sorted(took)


def deep_cursor(client: httpx2.Client, depth: int) -> str:
    """A cursor ``depth`` rows into the newest-first list (pages of 500)."""
    cursor = ""
    for _ in range(depth // 500):
        cursor = client.get("/v1/admin/decisions", params={"limit": 500, "cursor": cursor} if cursor
                            else {"limit": 500}).json()["next"]
    return cursor


def replica_delays(a: str, b: str, key: str, calls: int) -> list[float]:
    """Seconds from a call answered on ``a`` until ``b``'s console lists it."""
    delays = []
    with httpx2.Client(base_url=a, headers={"Authorization": f"Bearer {key}"}) as on_a, \
            httpx2.Client(base_url=b, headers={"Authorization": f"Bearer {key}"}) as on_b:
        for n in range(calls):
            run = f"replica-{n}-{time.time_ns()}"
            on_a.post("/v1/tools/http_echo/invoke", json={"arguments": {"text": "hi"}},
                      headers={"X-Gateway-Session": run}).raise_for_status()
            made = time.perf_counter()
            while not on_b.get("/v1/admin/decisions", params={"run": run}).json()["decisions"]:
                if time.perf_counter() - made > 30:
                    raise RuntimeError("the call never showed on the other replica")
                time.sleep(0.01)
            delays.append(time.perf_counter() - made)
    return sorted(delays)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    exit_on_sigterm()
    with work_directory(args.keep, "console-bench-") as directory:
        database = directory / "shared.sqlite3"
        started = time.perf_counter()
        fill(database, args.events)
        print(f"filled {args.events:,} decisions in {time.perf_counter() - started:.1f} s; load {loadavg()}")
        key, digest = new_api_key()
        processes = Processes()
        try:
            upstream = start_upstream(processes, "http", directory)
            replicas = []
            for name in ("a", "b"):
                (directory / name).mkdir(exist_ok=True)
                config = write_gateway_config(
                    directory / name, policy=POLICY,
                    upstreams=[{"name": "http", "http": {"base_url": upstream.url, "tools": [
                        {"name": t.removeprefix("http_"), "method": "POST", "path": "/echo"} for t in TOOLS]}}],
                    api_keys=[{"principal": {"id": "admin"}, "sha256": digest, "admin": True}],
                    extra={"store": {"sqlite": str(database), "shared": True}})
                replicas.append(start_gateway(processes, config, name=f"replica {name}"))
            report(replicas[0].url, replicas[1].url, key, args.reps)
        finally:
            processes.stop_all()
    return 0


def report(a: str, b: str, key: str, reps: int) -> None:
    """Time each read on replica ``b`` and the delay across replicas; print the figures."""
    with httpx2.Client(base_url=b, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        day_ago = rfc3339_ms(time.time() - 86400)
        reads = {
            "decisions, first page (50)": ("/v1/admin/decisions", {}),
            "decisions, tool + verdict": ("/v1/admin/decisions", {"tool": "http_delete", "verdict": "reject"}),
            "decisions, 50,000 deep": ("/v1/admin/decisions", {"cursor": deep_cursor(client, 50_000),
                                                                "since": rfc3339_ms(time.time() - 7 * 86400)}),
            "chart, one day": ("/v1/admin/decisions/chart", {"since": day_ago}),
            "run timeline (500 calls)": ("/v1/admin/runs/agent-0/run-0", {}),
            "policies (rule hits)": ("/v1/admin/policies", {}),
            "runs, first page": ("/v1/admin/runs", {}),
        }
        print(f"{'read':<30} {'p50 ms':>8} {'p99 ms':>8}")
        worst = 0.0
        for name, (path, params) in reads.items():
            took = timed(client, path, params, reps)
            worst = max(worst, percentile(took, 0.5))
            print(f"{name:<30} {percentile(took, 0.5):8.1f} {percentile(took, 0.99):8.1f}")
    print(f"{'PASS' if worst < GOAL_PAGE_MS else 'MISS'}: the slowest read's p50 is {worst:.1f} ms"
          f" (target < {GOAL_PAGE_MS:.0f} ms with 100,000 decisions)")
    delays = replica_delays(a, b, key, max(5, reps // 2))
    print(f"across replicas: p50 {percentile(delays, 0.5):.2f} s, max {delays[-1]:.2f} s"
          f" — {'PASS' if delays[-1] < GOAL_REPLICA_S else 'MISS'} (target < {GOAL_REPLICA_S:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
