"""The upstream leg of an MCP tools/call alone: the gateway's ``McpUpstream.call`` against the SDK's client.

One MCP upstream (``_servers.py``'s ``echo`` over streamable HTTP) runs in a subprocess; this process calls
``echo`` with 200 bytes, one call at a time, in alternating rounds so that load from elsewhere hits every
path alike:

- ``direct legacy`` / ``direct 2026-07-28``: the SDK's ``Client`` (what a direct call costs);
- ``McpUpstream <protocol> fast_calls=<on|off>``: the gateway's upstream, with ``mcp.protocol`` ``auto``
  (the handshake era with this server) or ``newest`` (2026-07-28), and the lean path on or off.

Per path: p50 latency, this process's CPU per call (the caller's side of the leg: the SDK's client or the
gateway's), the upstream's CPU per call, and the upstream's CPU over a direct 2026-07-28 call's.

    python bench/upstream_leg.py [--calls N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

BENCH_DIR = Path(__file__).resolve().parent
# `python bench/upstream_leg.py` puts bench/ first on the path, where bench/gateway.py would shadow the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
from gateway.upstreams.mcp import McpUpstream  # noqa: E402

sys.path.append(str(BENCH_DIR))
from _servers import Processes, loadavg, start_upstream, wait_healthy, work_directory  # noqa: E402

TEXT = "x" * 200
WARMUP = 20


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _round(call: Callable[[], Awaitable[Any]], calls: int, upstream_cpu: Callable[[], float]) -> tuple[
        list[float], float, float]:
    latencies = []
    own, theirs = _own_cpu(), upstream_cpu()
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - started)
    return latencies, _own_cpu() - own, upstream_cpu() - theirs


async def run(calls: int, rounds: int) -> list[dict[str, Any]]:
    """Measure every path; one row each."""
    processes = Processes()
    with work_directory(None, "bench-leg-") as directory:
        upstream = start_upstream(processes, "mcp", directory)
        try:
            wait_healthy(upstream)
            url = f"{upstream.url}/mcp"

            def upstream_cpu() -> float:
                return upstream.cpu_seconds() or 0.0

            async with contextlib.AsyncExitStack() as stack:
                paths: dict[str, Callable[[], Awaitable[Any]]] = {}
                for mode in ("legacy", "2026-07-28"):
                    client = await stack.enter_async_context(Client(streamable_http_client(url), mode=mode))
                    paths[f"direct {mode}"] = lambda c=client: c.call_tool("echo", {"text": TEXT})
                for protocol in ("auto", "newest"):
                    for fast in (False, True):
                        leg = McpUpstream("bench", url=url, protocol=protocol, fast_calls=fast)
                        await leg.start()
                        stack.push_async_callback(leg.close)
                        name = f"McpUpstream {protocol} fast_calls={'on' if fast else 'off'}"
                        paths[name] = lambda u=leg: u.call("echo", {"text": TEXT}, 30)
                for call in paths.values():
                    for _ in range(WARMUP):
                        await call()
                measured: dict[str, tuple[list[float], float, float]] = {name: ([], 0.0, 0.0) for name in paths}
                for i in range(rounds):
                    order = list(paths.items()) if i % 2 == 0 else list(reversed(paths.items()))
                    for name, call in order:
                        latencies, own, theirs = await _round(call, calls, upstream_cpu)
                        seen = measured[name]
                        measured[name] = (seen[0] + latencies, seen[1] + own, seen[2] + theirs)
        finally:
            processes.stop_all()
    total = calls * rounds
    rows = [{"path": name, "calls": total, "p50_ms": round(statistics.median(lat) * 1e3, 3),
             "caller_cpu_ms": round(own / total * 1e3, 3), "upstream_cpu_ms": round(theirs / total * 1e3, 3)}
            for name, (lat, own, theirs) in measured.items()]
    direct = next(r for r in rows if r["path"] == "direct 2026-07-28")
    for row in rows:
        row["upstream_cpu_x_direct_2026"] = round(row["upstream_cpu_ms"] / direct["upstream_cpu_ms"], 2) \
            if direct["upstream_cpu_ms"] else None
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per path per round (default 200)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args(argv)
    before = loadavg()
    rows = asyncio.run(run(args.calls, args.rounds))
    after = loadavg()
    if args.json:
        print(json.dumps({"loadavg_before": before, "loadavg_after": after, "rows": rows}, indent=2))
        return 0
    print(f"load average {before} before, {after} after; {args.rounds} alternating rounds of {args.calls} calls")
    print(f"{'path':<36} {'p50 ms':>7} {'caller CPU ms':>14} {'upstream CPU ms':>16} {'x direct 2026':>14}")
    for r in rows:
        print(f"{r['path']:<36} {r['p50_ms']:>7.2f} {r['caller_cpu_ms']:>14.2f} {r['upstream_cpu_ms']:>16.2f}"
              f" {r['upstream_cpu_x_direct_2026']:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
