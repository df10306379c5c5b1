"""The console's copy of the decision log, on SQLite and on PostgreSQL, written by one replica and read by
another on the same database: filters, keyset pages, the chart, rule hits, a run's timeline, retention."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gateway.core.clock import rfc3339_ms
from gateway.pipeline.audit_encode import encode_event
from gateway.store.decision_queries import DecisionFilter, DecisionQueries, decode_cursor
from gateway.store.decisions import DecisionLog

WEEK = 7 * 86400.0


def outcome(n: int, at: float, *, verdict: str = "allow", run: str = "run-1", tool: str = "api_search",
            principal: str = "alice") -> dict[str, Any]:
    """A call's outcome event as the audit log writes it (the fields the console reads)."""
    fired = [{"rule": "p/allow-search", "outcome": "fired", "action": "allow"}]
    if verdict == "reject":
        fired.append({"rule": "p/no-secret", "outcome": "fired", "action": "reject"})
    return {"event": "call.outcome", "id": f"ev-{n:05d}", "time": rfc3339_ms(at), "trace_id": None,
            "call_id": f"c-{n}", "principal": {"id": principal, "groups": [], "kind": "key"}, "session": run,
            "tool": tool, "upstream": "api", "original_args": {"q": n}, "final_args": {"q": n}, "verdict": verdict,
            "is_error": verdict != "allow", "message": None, "rules": fired,
            "decided_by": ["p/no-secret" if verdict == "reject" else "p/allow-search"],
            "latency": {"policy_us": 12.5, "upstream_ms": 1.0, "total_ms": 2.0}, "context": {"big": "x" * 10_000}}


def record(log: DecisionLog, event: dict[str, Any]) -> None:
    """What the audit log does after it wrote ``event``: hand it over with its line."""
    log.record(event, encode_event(event, 65_536, 262_144))


@pytest.fixture
def replicas(open_store: Any) -> Any:
    """Two replicas' decision logs on one database, and the second one's queries."""
    logs = [DecisionLog(store.connect_new, store.where, name, WEEK)
            for store, name in ((open_store(), "replica-a"), (open_store(), "replica-b"))]
    queries = DecisionQueries(logs[1])
    yield logs, queries
    queries.close()
    for log in logs:
        log.close()


async def test_a_call_on_one_replica_reads_on_the_other_with_filters_and_pages(replicas):
    (a, b), queries = replicas
    now = time.time()
    for n in range(250):
        record(a, outcome(n, now - 250 + n, verdict="reject" if n % 10 == 0 else "allow", run=f"run-{n % 3}"))
    record(b, outcome(999, now, principal="bob", tool="api_get_item"))
    record(b, {"event": "call.intent", "id": "not-kept"})  # intents are not the console's
    record(b, {"event": "call.outcome", "id": "odd", "time": rfc3339_ms(now - 1000), "principal": "not a map",
              "rules": "not a list"})  # kept as well as it can be: the file is the record
    assert a.flushed() and b.flushed()

    everything = DecisionFilter(since=now - 3600)
    rows, following, total = await queries.page(everything, 100, None)
    assert total == 252 and len(rows) == 100 and rows[0]["id"] == "ev-00999" and rows[0]["replica"] == "replica-b"
    seen = [r["id"] for r in rows]
    while following is not None:
        rows, following, _ = await queries.page(everything, 100, decode_cursor(following))
        seen += [r["id"] for r in rows]
    assert len(seen) == len(set(seen)) == 252 and seen[-1] == "odd"  # every row once, oldest last

    rejected, _, count = await queries.page(DecisionFilter(since=now - 3600, verdict="reject"), 100, None)
    assert count == 25 and {r["verdict"] for r in rejected} == {"reject"}
    bobs, _, count = await queries.page(DecisionFilter(since=now - 3600, principal="bob", tool="api_get_item"),
                                        10, None)
    assert count == 1 and bobs[0]["principal"]["id"] == "bob"

    chart = await queries.chart(everything)
    assert sum(sum(m["counts"].values()) for m in chart) == 252
    assert sum(m["counts"].get("reject", 0) for m in chart) == 25

    hits = await queries.rule_hits(time.time())
    assert hits["p/allow-search"] == (251, 251) and hits["p/no-secret"] == (25, 25)

    timeline = await queries.timeline("alice", "run-1", 1000)
    assert [int(e["id"][3:]) for e in timeline] == list(range(1, 250, 3))  # oldest first

    exported = list(queries.export(DecisionFilter(since=now - 3600, run="run-2"), 1000))
    assert len(exported) == 83 and all(line.endswith(b"\n") for line in exported)


async def test_text_a_database_cannot_hold_is_kept_readable(replicas):
    (a, _), queries = replicas
    odd = outcome(7, time.time(), run="run-\ud800")
    odd["final_args"] = {"q": "lone \udc00 surrogate"}
    record(a, odd)
    record(a, outcome(8, time.time()))  # the writer goes on after it
    assert a.flushed()
    rows, _, total = await queries.page(DecisionFilter(), 10, None)
    assert total == 2 and {r["final_args"]["q"] for r in rows} == {"lone \\udc00 surrogate", 8}  # as the file
    assert a.dropped == 0


def test_waiting_for_the_rows_queued_so_far_ends_while_calls_keep_coming(replicas):
    """A busy replica's console answers: flushed() waits for what was queued before it, not for an empty queue
    (calls recorded far faster than rows are written keep the queue from ever emptying)."""
    (a, _), _ = replicas
    record(a, outcome(0, time.time()))
    stop = threading.Event()
    event = outcome(1, time.time())
    line = encode_event(event, 65_536, 262_144)

    def busy() -> None:
        while not stop.is_set():
            a.record(event, line)

    producer = threading.Thread(target=busy)
    producer.start()
    try:
        assert a.flushed(timeout=60)
    finally:
        stop.set()
        producer.join()


async def test_rows_past_the_retention_are_pruned(replicas):
    (a, _), queries = replicas
    now = time.time()
    record(a, outcome(1, now - WEEK - 60))
    record(a, outcome(2, now - 60))
    assert a.flushed()
    assert a.prune(now) == 1
    rows, _, total = await queries.page(DecisionFilter(), 10, None)
    assert total == 1 and rows[0]["id"] == "ev-00002"
    assert await queries.rule_hits(now) == {"p/allow-search": (1, 1)}
