"""What the model proxy adds to one model request whose answer carries three tool calls, per model API.

A canned model (bench/_model_answers.py, one entry per API) runs in a subprocess on 127.0.0.1 and answers
every request with the same three ``deploy`` calls; the gateway runs as ``gateway serve`` in another, with a
``models:`` entry per API pointing at it and a policy of four rules over ``deploy`` (none refuses these
calls: all three are decided and returned). For each API and mode (whole, streamed) this process sends N
requests one after another, directly to the model and through the gateway, in alternating rounds, and
reports the p50 latency of each, and the gateway's CPU per request (its process's user + system time over
the gateway requests; the model and this client run elsewhere). Issue 22's target: at most 2 ms of gateway
CPU per request.

    python bench/model_proxy.py [--requests N] [--rounds R] [--api chat|responses|messages] [--json]
                                [--profile FILE]

Run it from the repository root with the project's virtualenv active. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.append(str(Path(__file__).resolve().parent))
from _model_answers import ANSWERS, Canned
from _servers import (
    Process,
    Processes,
    exit_on_sigterm,
    free_port,
    loadavg,
    new_api_key,
    start_gateway,
    work_directory,
    write_gateway_config,
)

TARGET_CPU_MS = 2.0  # issue 22: gateway CPU per model request whose answer carries 3 tool calls

POLICY = {"policy": "bench-models", "rules": [
    {"id": "no-prod", "tools": ["deploy"], "when": 'args.service == "prod"', "action": "reject",
     "message": "Not prod."},
    {"id": "payments-approval", "tools": ["deploy"], "when": 'args.service == "payments"', "action": "approve",
     "message": "Payments need ops.", "approval": {"approvers": ["group:ops"]}},
    {"id": "canary", "tools": ["deploy"], "when": 'args.service == "edge"', "action": "rewrite",
     "rewrite": {"set": {"service": '"edge-canary"'}}},
    {"id": "docs-dry-run", "tools": ["deploy"], "when": 'args.service == "docs"', "action": "skip",
     "result": {"deployed": False}},
]}


def _spawn_model(processes: Processes, directory: Path) -> Process:
    port = free_port()
    script = str(Path(__file__).resolve().parent / "_model_answers.py")
    return processes.spawn("model", [sys.executable, script, str(port)], directory / "model.log",
                           f"http://127.0.0.1:{port}")


def _body(api: str, canned: Canned, stream: bool) -> dict[str, Any]:
    return {**canned.request, "model": f"bench-{api}", "stream": stream}


async def _timed(client: httpx2.AsyncClient, url: str, body: dict[str, Any], n: int) -> list[float]:
    """``n`` requests one after another; each one's seconds (a streamed answer read to its end)."""
    out = []
    for _ in range(n):
        started = time.perf_counter()
        async with client.stream("POST", url, json=body) as response:
            await response.aread()
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:300]}")
        out.append(time.perf_counter() - started)
    return out


async def _measure(apis: list[str], gateway: Process, model: Process, key: str, requests: int,
                   rounds: int) -> list[dict[str, Any]]:
    rows = []
    async with httpx2.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
        for api in apis:
            canned = ANSWERS[api]
            for stream in (False, True):
                body = _body(api, canned, stream)
                direct: list[float] = []
                through: list[float] = []
                cpu = 0.0
                await _timed(client, f"{gateway.url}/v1{canned.path}", body, 20)  # warm up
                for _ in range(rounds):
                    direct += await _timed(client, f"{model.url}/v1{canned.path}", body, requests)
                    before = gateway.cpu_seconds() or 0.0
                    through += await _timed(client, f"{gateway.url}/v1{canned.path}", body, requests)
                    cpu += (gateway.cpu_seconds() or 0.0) - before
                per_request = cpu / (rounds * requests) * 1000
                rows.append({"api": api, "mode": "streamed" if stream else "whole",
                             "direct_p50_ms": statistics.median(direct) * 1000,
                             "gateway_p50_ms": statistics.median(through) * 1000,
                             "gateway_cpu_ms": per_request, "pass": per_request <= TARGET_CPU_MS})
    return rows


def _check_answer(gateway: Process, key: str, api: str) -> None:
    """The gateway returned all three calls (the benchmark times the path it means to)."""
    canned = ANSWERS[api]
    answer = httpx2.post(f"{gateway.url}/v1{canned.path}", json=_body(api, canned, False),
                         headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    calls = answer.get("gateway", {}).get("calls", [])
    if [c.get("status") for c in calls] != ["returned"] * 3:
        raise RuntimeError(f"{api}: the gateway did not return the three calls: {json.dumps(answer)[:500]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per round, per API and mode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--api", action="append", choices=sorted(ANSWERS), help="only this API (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--profile", type=Path, help="run the gateway under cProfile (CPU time), stats to FILE")
    args = parser.parse_args()
    exit_on_sigterm()
    apis = args.api or list(ANSWERS)
    processes = Processes()
    with work_directory(None, "bench-models-") as directory:
        try:
            model = _spawn_model(processes, directory)
            key, digest = new_api_key()
            models = [{"name": f"bench-{api}", "api": api, "base_url": f"{model.url}/v1", "model": "bench-model"}
                      for api in apis]
            config = write_gateway_config(
                directory, upstreams=[], policy=POLICY,
                api_keys=[{"principal": {"id": "bench-agent", "groups": ["agents"]}, "sha256": digest}],
                extra={"models": models})
            gateway = start_gateway(processes, config, profile=args.profile)
            for api in apis:
                _check_answer(gateway, key, api)
            rows = asyncio.run(_measure(apis, gateway, model, key, args.requests, args.rounds))
        finally:
            processes.stop_all()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"model proxy, 3 tool calls per answer, {args.rounds} x {args.requests} requests per row, "
          f"load {loadavg()}")
    print(f"{'api':<10} {'mode':<9} {'direct p50':>11} {'gateway p50':>12} {'gateway CPU/request':>20}")
    for row in rows:
        verdict = "PASS" if row["pass"] else "MISS"
        print(f"{row['api']:<10} {row['mode']:<9} {row['direct_p50_ms']:>9.2f}ms {row['gateway_p50_ms']:>10.2f}ms "
              f"{row['gateway_cpu_ms']:>16.2f} ms  {verdict} (target <= {TARGET_CPU_MS:g} ms)")


if __name__ == "__main__":
    main()
