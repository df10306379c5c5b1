"""What an MCP call costs the client: the SDK's ``Client`` calling ``echo`` directly, through the gateway, and
through two things that change nothing in what it receives but when: a byte-for-byte TCP forwarder, and the
same upstream answering 2 ms later.

Issue 12's runs showed a 2026-07-28 client spending more CPU per call against the gateway than against the
upstream directly, for the same one POST per call. This tells the two causes apart: if the client's CPU
grows as much when the upstream merely answers later (same bytes, no gateway), it is what waiting costs the
client's process (its caches and the CPU's power states after it sleeps), not what the gateway sends.

Each target is called with 200 bytes, one call at a time, in alternating rounds; per target: the client's
CPU per call (this process) and the p50 latency, median over the rounds.

    python bench/client_cost.py [--era legacy|2026-07-28|both] [--calls N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.append(str(Path(__file__).resolve().parent))
from _servers import (
    Processes,
    loadavg,
    new_api_key,
    start_forwarder,
    start_gateway,
    start_upstream,
    work_directory,
    write_gateway_config,
)

TEXT = "x" * 200
WARMUP = 30
DELAY_MS = 2.0
ERAS = ("legacy", "2026-07-28")
POLICY: dict[str, Any] = {"policy": "bench", "rules": [
    {"id": "allow-read-only", "when": "tool.annotations.readOnlyHint == true", "action": "allow"}]}


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _round(url: str, tool: str, era: str, calls: int, headers: dict[str, str] | None) -> tuple[float, float]:
    """(client CPU ms per call, p50 ms) over ``calls`` calls on one session."""
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            Client(streamable_http_client(url, http_client=http), mode=era) as client:
        for _ in range(WARMUP):
            await client.call_tool(tool, {"text": TEXT})
        latencies = []
        cpu = _own_cpu()
        for _ in range(calls):
            started = time.perf_counter()
            result = await client.call_tool(tool, {"text": TEXT})
            latencies.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(f"{url}: {tool} failed: {result.content}")
        return 1000 * (_own_cpu() - cpu) / calls, 1000 * statistics.median(latencies)


async def run(eras: Sequence[str], calls: int, rounds: int) -> list[dict[str, Any]]:
    with work_directory(None, "bench-client-cost-") as directory:
        processes = Processes()
        try:
            upstream = start_upstream(processes, "mcp", directory)
            later = start_upstream(processes, "mcp", directory, delay_ms=DELAY_MS)
            forwarder = start_forwarder(processes, upstream, directory)
            key, digest = new_api_key()
            config = write_gateway_config(
                directory, upstreams=[{"name": "tools", "mcp": {"url": f"{upstream.url}/mcp"}}], policy=POLICY,
                api_keys=[{"principal": {"id": "bench"}, "sha256": digest}])
            gateway = start_gateway(processes, config)
            targets = {"direct": (f"{upstream.url}/mcp", "echo", None),
                       "forwarder": (f"{forwarder.url}/mcp", "echo", None),
                       f"upstream +{DELAY_MS:g} ms": (f"{later.url}/mcp", "echo", None),
                       "gateway": (f"{gateway.url}/mcp", "tools_echo", {"Authorization": f"Bearer {key}"})}
            rows = []
            for era in eras:
                seen: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
                for _ in range(rounds):
                    for name, (url, tool, headers) in targets.items():
                        seen[name].append(await _round(url, tool, era, calls, headers))
                for name, measured in seen.items():
                    rows.append({"era": era, "target": name,
                                 "client_cpu_ms": round(statistics.median(m[0] for m in measured), 3),
                                 "p50_ms": round(statistics.median(m[1] for m in measured), 3)})
            return rows
        finally:
            processes.stop_all()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--era", choices=("both", *ERAS), default="both")
    parser.add_argument("--calls", type=int, default=600, help="calls per target per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    before = loadavg()
    rows = asyncio.run(run(ERAS if args.era == "both" else (args.era,), args.calls, args.rounds))
    if args.json:
        print(json.dumps({"loadavg": [before, loadavg()], "rows": rows}, indent=2))
        return 0
    print(f"load average before / after: {before} / {loadavg()}")
    print(f"{'era':12} {'target':18} {'client CPU/call':>16} {'x direct':>9} {'p50':>9}")
    for row in rows:
        direct = next(r for r in rows if r["era"] == row["era"] and r["target"] == "direct")
        ratio = row["client_cpu_ms"] / direct["client_cpu_ms"]
        print(f"{row['era']:12} {row['target']:18} {row['client_cpu_ms']:13.3f} ms {ratio:8.2f}x"
              f" {row['p50_ms']:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
