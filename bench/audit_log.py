"""What the decision log's hash chain costs per event: ``AuditLog.write`` with the chain and without it.

The gateway's own ``AuditLog`` (gateway/pipeline/audit.py) writes a realistic ``call.outcome`` event (the
shape docs/gateway.md shows, about 1.2 KB as JSON) to a file in a temporary directory, event by event,
as a call writes its outcome. Cases, measured in interleaved rounds so that load from elsewhere hits all
of them alike, each writing its own file:

* ``no chain``: the writer as it was before the chain (``chain=None``): encode, ``stat``, ``write(2)``;
* ``chain``: the same with the chain fields spliced into the encoded bytes and the line hashed (SHA-256)
  under the write's lock: what every event pays now;
* ``chain + signed``: the chain with an Ed25519 checkpoint every 1,000 events (``audit.sign``).

It prints p50, mean and p99 per event, and the chain's cost over ``no chain`` (the issue's target: at most
1.10 times, by p50 and by mean); then how fast ``gateway audit verify`` reads the chained file back.

    python bench/audit_log.py [--quick] [--json] [--events N] [--dir DIR]

Run it from the repository root with the project's virtualenv active. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
# `python bench/audit_log.py` puts bench/ first on the path, where bench/gateway.py would shadow the package:
# the repository root goes first instead.
sys.path[:] = [str(BENCH_DIR.parent), *(p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR)]
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from gateway.core.audit_head import audit_head  # noqa: E402
from gateway.core.clock import now_rfc3339  # noqa: E402
from gateway.pipeline.audit import AuditLog, ChainSettings  # noqa: E402
from gateway.pipeline.audit_keys import CheckpointSigner  # noqa: E402
from gateway.pipeline.audit_verify import verify  # noqa: E402

sys.path.append(str(BENCH_DIR))
from _servers import filesystem_of, loadavg, percentile  # noqa: E402

FULL = 30_000  # events per case
QUICK = 3_000
ROUND = 500  # events per case per round; rounds alternate the cases
GOAL_RATIO = 1.10  # issue 23: the chain keeps the per-event cost within 10% of the writer without it


def outcome_event(n: int) -> dict[str, Any]:
    """A call.outcome event as the pipeline builds it (gateway/pipeline/call_events.py)."""
    return {**audit_head("call.outcome", now_rfc3339(), "4bf92f3577b34da6a3ce929d0e0e4736"),
            "call_id": f"c-{n}", "iteration": 0, "frontend": "rest",
            "principal": {"id": "quickstart-user", "groups": ["developers"], "kind": "key"},
            "session": "quickstart-user", "tool": "payments_transfer", "upstream": "payments",
            "original_args": {"to": "acct-1234", "amount": 2500, "currency": "USD", "memo": "invoice 2026-11"},
            "final_args": {"to": "acct-1234", "amount": 2500, "currency": "USD", "memo": "invoice 2026-11"},
            "verdict": "approve", "is_error": False, "message": None,
            "rules": [{"rule": "payments/large-transfer-needs-approval", "action": "approve", "outcome": "fired",
                       "mode": "enforce", "elapsed_us": 12.4, "effect": "approve", "stage": "request"},
                      {"rule": "payments/no-weekend-transfers", "action": "reject", "outcome": "not_fired",
                       "mode": "enforce", "elapsed_us": 3.1, "effect": None, "stage": "request"}],
            "decided_by": ["payments/large-transfer-needs-approval"],
            "approval": {"id": "9c1d6a0e4b7f4e2a8d3c5b1a0f9e8d7c", "approved": True, "pending": False,
                         "replayed": False},
            "upstream_outcome": {"status": "ok", "is_error": False},
            "latency": {"policy_us": 31.0, "upstream_ms": 2.1, "total_ms": 3.4},
            "revision": "sha256:4f2a9c1e", "redacted": []}


def measure(events: int, where: Path) -> dict[str, Any]:
    signer = CheckpointSigner(Ed25519PrivateKey.generate())
    logs = {"no chain": AuditLog(where / "plain.jsonl", chain=None),
            "chain": AuditLog(where / "chained.jsonl"),
            "chain + signed": AuditLog(where / "signed.jsonl", chain=ChainSettings(signer, every=1_000))}
    samples: dict[str, list[int]] = {name: [] for name in logs}
    prepared = [outcome_event(n) for n in range(ROUND)]  # built before timing: building is the pipeline's cost
    for log in logs.values():  # warm-up: first opens, caches
        for event in prepared[:50]:
            log.write(event)
    clock = time.perf_counter_ns
    while min(len(s) for s in samples.values()) < events:
        for name, log in logs.items():
            own = samples[name]
            for event in prepared:
                started = clock()
                log.write(event)
                own.append(clock() - started)
    for log in logs.values():
        log.close()
    line_bytes = (where / "chained.jsonl").stat().st_size / (len(samples["chain"]) + 50)
    started = time.perf_counter()
    report = verify([where / "chained.jsonl"])
    took = time.perf_counter() - started
    if not report.ok:
        raise SystemExit("the chained file does not verify: the figures would describe something else")
    cases = {}
    for name, taken in samples.items():
        ordered = sorted(taken)
        cases[name] = {"samples": len(taken), "p50_us": percentile(ordered, 0.5) / 1000,
                       "mean_us": statistics.fmean(taken) / 1000, "p99_us": percentile(ordered, 0.99) / 1000}
    base = cases["no chain"]
    for case in cases.values():
        case["p50_ratio"] = case["p50_us"] / base["p50_us"]
        case["mean_ratio"] = case["mean_us"] / base["mean_us"]
    size = (where / "chained.jsonl").stat().st_size
    return {"cases": cases, "line_bytes": round(line_bytes), "filesystem": filesystem_of(where),
            "verify": {"events": report.events, "seconds": took, "mb_per_s": size / took / 1e6,
                       "us_per_event": took / report.events * 1e6},
            "loadavg": loadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK} events per case: a smoke run")
    parser.add_argument("--events", type=int, help=f"events per case (default {FULL})")
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args(argv)
    events = args.events or (QUICK if args.quick else FULL)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="audit-bench-") as folder:
        result = measure(events, Path(folder))
    chained = result["cases"]["chain"]
    result["pass"] = chained["p50_ratio"] <= GOAL_RATIO and chained["mean_ratio"] <= GOAL_RATIO
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"AuditLog.write per event: a call.outcome of {result['line_bytes']} bytes a line, on"
          f" {result['filesystem']}")
    print(f"{'case':<16}{'samples':>9}{'p50 µs':>9}{'mean µs':>9}{'p99 µs':>9}{'p50 x':>8}{'mean x':>8}")
    for name, case in result["cases"].items():
        print(f"{name:<16}{case['samples']:>9}{case['p50_us']:>9.2f}{case['mean_us']:>9.2f}{case['p99_us']:>9.2f}"
              f"{case['p50_ratio']:>8.3f}{case['mean_ratio']:>8.3f}")
    verdict = "PASS" if result["pass"] else "MISS"
    print(f"{verdict}: the chain costs {chained['p50_ratio']:.3f}x (p50) and {chained['mean_ratio']:.3f}x (mean) the"
          f" writer without it (target ≤ {GOAL_RATIO:.2f}x)")
    check = result["verify"]
    print(f"gateway audit verify: {check['events']} events in {check['seconds']:.2f} s"
          f" ({check['us_per_event']:.1f} µs an event, {check['mb_per_s']:.0f} MB/s)")
    print(f"load average: {result['loadavg']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
