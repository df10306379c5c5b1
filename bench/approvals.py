"""Load test for human approval: N held calls, approved in bulk, each run exactly once.

Starts an HTTP upstream (``POST /execute`` counts its runs per ``request`` argument; ``GET /counts``
reports them) and ``gateway serve`` with a policy under which every call to ``ledger_execute``
needs an approver. Then:

1. fires N calls at once through the REST API (``?wait=120s``, distinct call ids), each held;
2. waits until all N approval requests are pending, and holds them a while (the idle cost);
3. lists pending requests and approves them through ``POST /v1/approvals/{id}/decision`` with
   bounded concurrency, until all N are approved;
4. waits for all N callers to get their results;
5. retries every call id once (same arguments): each must get the same result, without running;
6. reads the counts from the upstream directly and checks every call ran exactly once.

Prints the timings of each phase and the checks; exits 1 if any check fails (2 if the setup
breaks).

    python bench/approvals.py [--n N] [--quick] [--json] [--hold S] [--wait S] [--keep DIR] [--profile FILE]

Run it from the repository root with the project's virtualenv active. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

sys.path.append(str(Path(__file__).resolve().parent))  # `_servers` also under `python -m bench.approvals`
from _servers import (
    Process,
    Processes,
    exit_on_sigterm,
    filesystem_of,
    loadavg,
    new_api_key,
    percentile,
    raise_fd_limit,
    start_gateway,
    start_upstream,
    work_directory,
    write_gateway_config,
)

DEFAULT_N = 1_000
QUICK_N = 50
WAIT_S = 120.0  # each caller's ?wait=
APPROVER_CONCURRENCY = 32  # decisions in flight at once
CALLERS_PER_CLIENT = 50  # held calls per httpx2 client (see agent_clients)
HOLD_S, QUICK_HOLD_S = 16.0, 2.0  # idle hold with everything pending: longer than the 15 s wake-up of waiters
PENDING_TIMEOUT_S = 120.0  # all N must be pending within this
POLL_S = 0.05

TOOL = "ledger_execute"
POLICY: dict[str, Any] = {
    "policy": "ledger",
    "description": "Every ledger write needs a finance approver.",
    "rules": [
        {"id": "allow-read-only", "when": "tool.annotations.readOnlyHint == true", "action": "allow"},
        {"id": "ledger-writes-need-approval", "tools": [TOOL], "action": "approve",
         "messageExpression": '"Ledger write of " + string(args.amount) + " needs approval."',
         "approval": {"approvers": ["group:finance-approvers"], "timeout": "30m", "on_timeout": "reject"}},
    ],
}


class SetupError(Exception):
    """The test could not run as intended (a process failed, a phase timed out)."""


@dataclass
class Caller:
    """One held call: what it sent, when, and what came back."""

    index: int
    done: float | None = None
    status: int | None = None
    body: dict[str, Any] | None = None
    error: str | None = None
    retry_status: int | None = None
    retry_body: dict[str, Any] | None = None
    retry_error: str | None = None
    approved_sent: float | None = None  # when the approver sent the decision for this call

    @property
    def call_id(self) -> str:
        """The call id, also the upstream's counting key."""
        return f"bench-{self.index:05d}"

    def request_body(self) -> dict[str, Any]:
        """The invoke body (identical on the retry)."""
        return {"call_id": self.call_id, "arguments": {"request": self.call_id, "amount": self.index + 1}}


@dataclass
class Report:
    """Timings, resource figures and checks."""

    n: int
    timings: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str, *, fatal: bool = True) -> None:
        """Record one PASS, or FAIL (fatal: the exit status says so) / MISS (a finding, reported only)."""
        self.checks.append({"check": name, "result": "PASS" if ok else "FAIL" if fatal else "MISS",
                            "detail": detail})


# ---------------------------------------------------------------------------------------------
# Phases


async def invoke(client: httpx2.AsyncClient, url: str, caller: Caller, retry: bool) -> None:
    """One REST invoke, recorded on the caller (first call or retry)."""
    try:
        response = await client.post(url, json=caller.request_body())
        status, body, error = response.status_code, response.json(), None
    except Exception as exc:  # recorded and reported as a failed call
        status, body, error = None, None, f"{type(exc).__name__}: {exc}"
    if retry:
        caller.retry_status, caller.retry_body, caller.retry_error = status, body, error
    else:
        caller.status, caller.body, caller.error, caller.done = status, body, error, time.perf_counter()


def count_states(db: Path) -> dict[str, int]:
    """Approval requests by state, read from the gateway's SQLite file (read-only, beside the gateway).

    Read from the file rather than paged through GET /v1/approvals, so that counting costs the
    gateway nothing while it is being measured.
    """
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT state, count(*) FROM approvals GROUP BY state").fetchall())
    except sqlite3.Error:
        return {}  # the table is created by the gateway at start; not there yet means none


async def wait_for(predicate_desc: str, check: Any, timeout: float, tasks: Sequence[asyncio.Task[None]]) -> float:
    """Poll ``check()`` until true; the time it became true. Fails early if callers finished (they should not)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if check():
            return time.perf_counter()
        finished = [t for t in tasks if t.done()]
        if finished:
            raise SetupError(f"{len(finished)} caller(s) returned while {predicate_desc}")
        await asyncio.sleep(POLL_S)
    raise SetupError(f"timed out after {timeout:.0f}s while {predicate_desc}")


async def approve_all(client: httpx2.AsyncClient, base: str, callers: dict[str, Caller], n: int,
                      report: Report, deadline: float) -> tuple[float, float]:
    """List pending requests and approve them until ``n`` are approved; (first sent, last answered)."""
    semaphore = asyncio.Semaphore(APPROVER_CONCURRENCY)
    decided: set[str] = set()
    list_ms: list[float] = []
    decision_ms: list[float] = []
    problems: list[str] = []
    first_sent: float | None = None
    last_done = 0.0

    async def decide(approval: dict[str, Any]) -> None:
        nonlocal first_sent, last_done
        async with semaphore:
            caller = callers.get(approval["call_id"])
            sent = time.perf_counter()
            first_sent = sent if first_sent is None else first_sent
            if caller is not None:
                caller.approved_sent = sent
            response = await client.post(f"{base}/v1/approvals/{approval['id']}/decision",
                                         json={"approve": True, "comment": "bench"})
            done = time.perf_counter()
            decision_ms.append((done - sent) * 1e3)
            last_done = max(last_done, done)
            if response.status_code == 200:
                decided.add(approval["id"])
            elif len(problems) < 5:
                problems.append(f"{approval['id']}: HTTP {response.status_code} {response.text[:200]}")

    rounds = 0
    while len(decided) < n and time.perf_counter() < deadline:
        rounds += 1
        started = time.perf_counter()
        response = await client.get(f"{base}/v1/approvals", params={"state": "pending"})
        list_ms.append((time.perf_counter() - started) * 1e3)
        if response.status_code != 200:
            raise SetupError(f"listing approvals: HTTP {response.status_code} {response.text[:300]}")
        pending = [a for a in response.json()["approvals"] if a["id"] not in decided]
        if rounds == 1:
            report.figures["first_list_size"] = len(response.json()["approvals"])
        if not pending:
            await asyncio.sleep(POLL_S)
            continue
        await asyncio.gather(*(decide(a) for a in pending))
    if problems:
        raise SetupError(f"decisions refused: {problems}")
    if len(decided) < n:
        raise SetupError(f"only {len(decided)} of {n} approvals decided before the deadline")
    report.figures["list_rounds"] = rounds
    report.figures["list_ms_mean"] = round(sum(list_ms) / len(list_ms), 1)
    report.figures["list_ms_max"] = round(max(list_ms), 1)
    ordered = sorted(decision_ms)
    report.figures["decision_ms_p50"] = round(percentile(ordered, 0.5), 1)
    report.figures["decision_ms_p99"] = round(percentile(ordered, 0.99), 1)
    assert first_sent is not None
    return first_sent, last_done


@dataclass
class PhaseMeter:
    """Wall time and the CPU spent by the gateway and by this (client) process, phase by phase."""

    gateway: Process
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    _last: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def start(self) -> float:
        """Begin the first phase; its start time."""
        self._last = (time.perf_counter(), self.gateway.cpu_seconds() or 0.0, time.process_time())
        return self._last[0]

    def end(self, phase: str, at: float | None = None) -> None:
        """End ``phase`` (at ``at``, default now) and begin the next."""
        now = (at or time.perf_counter(), self.gateway.cpu_seconds() or 0.0, time.process_time())
        self.phases[phase] = {"wall_s": round(now[0] - self._last[0], 3),
                              "gateway_cpu_s": round(now[1] - self._last[1], 2),
                              "client_cpu_s": round(now[2] - self._last[2], 2)}
        self._last = now


@contextlib.asynccontextmanager
async def agent_clients(n: int, key: str, wait_s: float) -> AsyncIterator[list[httpx2.AsyncClient]]:
    """Enough clients for ``n`` held calls at once, ``CALLERS_PER_CLIENT`` connections each.

    One client with n connections would cost O(n) per request: httpcore checks every pooled
    connection (a poll() each) whenever it assigns one, so the load generator, not the
    gateway, would be what is measured.
    """
    limits = httpx2.Limits(max_connections=CALLERS_PER_CLIENT, max_keepalive_connections=CALLERS_PER_CLIENT)
    timeout = httpx2.Timeout(30.0, read=wait_s + 30.0)
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=timeout, limits=limits))
            for _ in range(math.ceil(n / CALLERS_PER_CLIENT))]


def gateway_config(directory: Path, upstream: Process, agent_digest: str, approver_digest: str, n: int) -> Path:
    """The config: the counting upstream, the approval policy, an agent key and an approver key, and room for
    the agent key's ``n`` held calls at once (its running calls, held calls and connection share; a key
    takes at most a third of the connections others do not hold, so three times as many of those)."""
    return write_gateway_config(
        directory,
        upstreams=[{"name": "ledger", "http": {"base_url": upstream.url, "tools": [
            {"name": "execute", "description": "Write an entry to the ledger.", "method": "POST",
             "path": "/execute",
             "input_schema": {"type": "object", "properties": {"request": {"type": "string"},
                                                               "amount": {"type": "number"}},
                              "required": ["request", "amount"]},
             "annotations": {"readOnlyHint": False, "destructiveHint": True}}]}}],
        policy=POLICY,
        api_keys=[{"principal": {"id": "bench-agent", "groups": ["agents"]}, "sha256": agent_digest},
                  {"principal": {"id": "alice", "groups": ["finance-approvers"]}, "sha256": approver_digest,
                   "approver": True}],
        extra={"limits": {"per_principal": {"max_concurrent_calls": n + 64, "max_held_calls": n}},
               "http": {"max_connections": 3 * n + 256, "max_connections_per_principal": n + 64}},
    )


async def run(directory: Path, processes: Processes, n: int, hold_s: float, wait_s: float, report: Report,
              profile: Path | None = None) -> None:
    """All six phases; timings and checks go into ``report``."""
    upstream = start_upstream(processes, "http", directory)
    agent_key, agent_digest = new_api_key()
    approver_key, approver_digest = new_api_key()
    gateway = start_gateway(processes, gateway_config(directory, upstream, agent_digest, approver_digest, n),
                            profile=profile)
    db = directory / "gateway.sqlite3"
    invoke_url = f"{gateway.url}/v1/tools/{TOOL}/invoke?wait={wait_s:g}s"
    callers = [Caller(i) for i in range(n)]
    meter = PhaseMeter(gateway)

    async with agent_clients(n, agent_key, wait_s) as agents, \
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {approver_key}"}, timeout=30.0,
                               limits=httpx2.Limits(max_connections=APPROVER_CONCURRENCY + 4)) as approver:
        # 1-2: fire every call; wait until every approval request is pending; hold.
        started = meter.start()
        tasks = [asyncio.create_task(invoke(agents[c.index // CALLERS_PER_CLIENT], invoke_url, c, retry=False))
                 for c in callers]
        all_pending = await wait_for(f"waiting for {n} pending approvals",
                                     lambda: count_states(db).get("pending", 0) >= n, PENDING_TIMEOUT_S, tasks)
        meter.end("create", all_pending)
        report.timings["create_pending_s"] = all_pending - started
        await list_once(approver, gateway.url, n, report)
        report.figures["gateway_rss_mb_holding"] = round(gateway.rss_mb() or 0.0, 1)
        meter.end("list")
        await asyncio.sleep(hold_s)
        if any(t.done() for t in tasks):
            raise SetupError("callers returned while their approvals were pending")
        meter.end("hold")
        report.figures["hold_s"] = hold_s
        report.figures["gateway_cpu_pct_while_holding"] = round(
            100 * meter.phases["hold"]["gateway_cpu_s"] / hold_s, 1)

        # 3: approve everything.
        first_sent, last_decided = await approve_all(approver, gateway.url, {c.call_id: c for c in callers}, n,
                                                     report, deadline=started + wait_s - 5)
        meter.end("approve", last_decided)
        report.timings["approve_all_s"] = last_decided - first_sent
        report.figures["decisions_per_s"] = round(n / (last_decided - first_sent), 1)

        # 4: every caller gets its result.
        _, waiting = await asyncio.wait(tasks, timeout=wait_s)
        if waiting:
            raise SetupError(f"{len(waiting)} callers still waiting {wait_s:.0f}s after the approvals")
        last_result = max(c.done or 0.0 for c in callers)
        meter.end("results", last_result)
        report.timings["last_approval_to_last_result_s"] = last_result - last_decided
        latencies = sorted((c.done - c.approved_sent) * 1e3 for c in callers
                           if c.done is not None and c.approved_sent is not None)
        report.figures["approve_to_result_ms_p50"] = round(percentile(latencies, 0.5), 1)
        report.figures["approve_to_result_ms_p99"] = round(percentile(latencies, 0.99), 1)
        report.figures["approve_to_result_ms_max"] = round(latencies[-1], 1)
        report.timings["first_call_to_last_result_s"] = last_result - started

    # 5: retry every call id once, on fresh connections (the first ones may have idled out).
    async with agent_clients(n, agent_key, wait_s) as agents:
        retry_started = time.perf_counter()
        await asyncio.gather(*(invoke(agents[c.index // CALLERS_PER_CLIENT], invoke_url, c, retry=True)
                               for c in callers))
        report.timings["retry_all_s"] = time.perf_counter() - retry_started
        meter.end("retry")
    report.timings["total_s"] = time.perf_counter() - started
    report.figures["phases"] = meter.phases

    # 6: verify against the upstream's own counts.
    async with httpx2.AsyncClient(timeout=30.0) as direct:
        counts: dict[str, int] = (await direct.get(f"{upstream.url}/counts")).json()["counts"]
    verify(callers, counts, report)
    report.figures["failed_calls"] = failures_from_audit(directory / "audit.jsonl", callers, counts)
    report.figures["approval_states_at_end"] = count_states(db)
    report.figures["gateway_rss_mb_end"] = round(gateway.rss_mb() or 0.0, 1)


async def list_once(approver: httpx2.AsyncClient, base: str, n: int, report: Report) -> None:
    """Time one listing with everything pending, and see whether it shows them all."""
    started = time.perf_counter()
    listed = await approver.get(f"{base}/v1/approvals", params={"state": "pending"})
    report.figures["list_pending_ms_at_n"] = round((time.perf_counter() - started) * 1e3, 1)
    body = listed.json() if listed.status_code == 200 else {}
    shown = len(body.get("approvals", []))
    total = int(body.get("total", -1))
    report.figures["list_pending_shows"] = shown
    report.check("api_lists_all_pending", total == n,
                 f"GET /v1/approvals?state=pending reports {total} of {n} pending"
                 f" (first page {shown}; the rest by ?offset=)", fatal=False)


def failures_from_audit(audit: Path, callers: Sequence[Caller], counts: dict[str, int]) -> list[dict[str, Any]]:
    """What the gateway's audit log says about calls that did not run exactly once (the first 5)."""
    bad = {c.call_id for c in callers if counts.get(c.call_id) != 1}
    found: list[dict[str, Any]] = []
    for line in audit.read_text().splitlines() if bad and audit.exists() else []:
        event = json.loads(line)
        if event.get("event") == "call.outcome" and event.get("call_id") in bad and len(found) < 5:
            found.append({k: event.get(k) for k in ("call_id", "time", "verdict", "message", "approval",
                                                    "upstream_outcome", "latency")})
    return found


def verify(callers: Sequence[Caller], counts: dict[str, int], report: Report) -> None:
    """Every call got a result, the retry got the same one, and the upstream ran each exactly once."""
    n = len(callers)
    ok = [c for c in callers if c.status == 200 and c.body and c.body.get("decision") == "approve"
          and not c.body.get("is_error") and (c.body.get("structured") or {}).get("request") == c.call_id]
    bad = [c for c in callers if c not in ok]
    report.check("every_caller_got_its_result", not bad,
                 f"{len(ok)}/{n} callers got HTTP 200 with their own result"
                 + (f"; e.g. {bad[0].call_id}: {bad[0].status} {bad[0].error or json.dumps(bad[0].body)[:300]}"
                    if bad else ""))
    same = [c for c in callers if c.retry_status == 200 and c.retry_body == c.body]
    differ = [c for c in callers if c not in same]
    report.check("retry_returns_same_result", not differ,
                 f"{len(same)}/{n} retries returned the identical body"
                 + (f"; e.g. {differ[0].call_id}: {differ[0].retry_status} "
                    f"{differ[0].retry_error or json.dumps(differ[0].retry_body)[:300]}" if differ else ""))
    expected = {c.call_id for c in callers}
    wrong = {k: v for k, v in counts.items() if k not in expected or v != 1}
    missing = sorted(expected - counts.keys())
    report.check("each_call_ran_exactly_once", not wrong and not missing,
                 f"upstream ran {len(counts)} distinct calls, {sum(counts.values())} executions for {n} call ids"
                 + (f"; not exactly once: {dict(list(wrong.items())[:5])}" if wrong else "")
                 + (f"; never ran: {missing[:5]}" if missing else ""))


# ---------------------------------------------------------------------------------------------
# Report


def print_report(report: Report, environment: dict[str, Any]) -> None:
    """The human-readable report."""
    t, f, n = report.timings, report.figures, report.n
    phases = f["phases"]

    def cpu(phase: str) -> str:
        p = phases[phase]
        return (f"gateway CPU {p['gateway_cpu_s']:.1f} s = {p['gateway_cpu_s'] * 1e3 / n:.1f} ms/call,"
                f" client CPU {p['client_cpu_s']:.1f} s")

    print(f"{n:,} held calls; {environment['cpus']} CPUs, work dir on {environment['filesystem']},"
          f" fd limit {environment['fd_limit']}, load average {environment['loadavg_before']} before,"
          f" {environment['loadavg_after']} after")
    print()
    print(f"create {n:,} pending approvals   {t['create_pending_s']:8.2f} s   ({n / t['create_pending_s']:,.0f}/s;"
          f" {cpu('create')})")
    print(f"list pending ({n:,} pending)     {f['list_pending_ms_at_n']:8.1f} ms  (shows {f['list_pending_shows']};"
          f" {f['list_rounds']} listings while approving, mean {f['list_ms_mean']:.1f} ms,"
          f" max {f['list_ms_max']:.1f} ms)")
    print(f"hold {f['hold_s']:g} s, all pending         gateway CPU {f['gateway_cpu_pct_while_holding']}%,"
          f" RSS {f['gateway_rss_mb_holding']} MiB")
    print(f"approve all                   {t['approve_all_s']:8.2f} s   ({f['decisions_per_s']:,.0f} decisions/s,"
          f" {APPROVER_CONCURRENCY} in flight, decision p50 {f['decision_ms_p50']:.1f} ms"
          f" p99 {f['decision_ms_p99']:.1f} ms; {cpu('approve')})")
    print(f"last approval → last result   {t['last_approval_to_last_result_s']:8.2f} s   ({cpu('results')})")
    print(f"approve → result latency      p50 {f['approve_to_result_ms_p50']:.1f} ms,"
          f" p99 {f['approve_to_result_ms_p99']:.1f} ms, max {f['approve_to_result_ms_max']:.1f} ms")
    print(f"first call → last result      {t['first_call_to_last_result_s']:8.2f} s   (includes the hold)")
    print(f"retry every call id once      {t['retry_all_s']:8.2f} s   ({n / t['retry_all_s']:,.0f}/s; {cpu('retry')})")
    print(f"total                         {t['total_s']:8.2f} s")
    print(f"approval states at the end    {f['approval_states_at_end']}; gateway RSS {f['gateway_rss_mb_end']} MiB")
    print()
    for c in report.checks:
        print(f"{c['result']}  {c['check']}: {c['detail']}")
    for event in f["failed_calls"]:
        print(f"      audit log: {json.dumps(event)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the load test; exit 1 if a check fails, 2 if it could not run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=DEFAULT_N, help=f"held calls (default {DEFAULT_N:,})")
    parser.add_argument("--quick", action="store_true", help=f"n={QUICK_N} and a short hold, for a smoke run")
    parser.add_argument("--hold", type=float, help=f"seconds to hold with all pending (default {HOLD_S:g})")
    parser.add_argument("--wait", type=float, default=WAIT_S, help=f"each caller's ?wait= (default {WAIT_S:g})")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write the config, logs, audit file and SQLite to DIR and keep them")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="run the gateway under cProfile and write its stats to FILE (slows it down)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a report")
    args = parser.parse_args(argv)
    n = QUICK_N if args.quick else max(1, args.n)
    hold_s = args.hold if args.hold is not None else QUICK_HOLD_S if args.quick else HOLD_S

    fd_limit = raise_fd_limit()
    if fd_limit < 2 * n + 200:  # each held call is a socket in this process and one in the gateway
        print(f"error: the file-descriptor limit ({fd_limit}) is too low for {n} held calls", file=sys.stderr)
        return 2
    report = Report(n)
    exit_on_sigterm()
    processes = Processes()
    try:
        with work_directory(args.keep, "bench-approvals-") as directory:
            environment: dict[str, Any] = {
                "python": sys.version.split()[0], "cpus": os.cpu_count(), "fd_limit": fd_limit,
                "filesystem": filesystem_of(directory), "loadavg_before": loadavg()}
            try:
                asyncio.run(run(directory, processes, n, hold_s, args.wait, report, args.profile))
            except SetupError as exc:
                gateway_log = (directory / "gateway.log")
                tail = gateway_log.read_text(errors="replace")[-2000:] if gateway_log.exists() else ""
                print(f"error: {exc}\ngateway log:\n{tail}", file=sys.stderr)
                return 2
            finally:
                processes.stop_all()
    except RuntimeError as exc:  # a subprocess did not start
        print(f"error: {exc}", file=sys.stderr)
        return 2
    environment["loadavg_after"] = loadavg()
    report.timings = {k: round(v, 3) for k, v in report.timings.items()}
    if args.json:
        print(json.dumps({"n": n, "environment": environment, "timings_s": report.timings,
                          "figures": report.figures, "checks": report.checks}, indent=2))
    else:
        print_report(report, environment)
    return 1 if any(c["result"] == "FAIL" for c in report.checks) else 0


if __name__ == "__main__":
    sys.exit(main())
