"""What the gateway adds to a tool call: the same trivial tool, directly and through the gateway.

Two upstreams run in subprocesses on 127.0.0.1: an MCP server with an ``echo`` tool (streamable
HTTP) and a Starlette app with ``POST /echo``. The gateway runs as ``gateway serve`` in a third
subprocess, with both as upstreams, a small policy (four rules evaluated per call), an audit
file, SQLite and an API key. For each protocol (MCP, REST) and target (direct, gateway) it times

* sequential: one call after another over one long-lived session / connection; p50 and p99,
* concurrent: a fixed number of calls spread over C workers sharing that session; calls/s,

MCP in both protocol eras (``legacy``, i.e. 2025-11-25 with the initialize handshake, and
2026-07-28), and with ``--peers`` two other MCP proxies in front of the same upstream, measured in the
same rounds: a FastMCP proxy reusing one upstream session, and mcp-proxy (each from PyPI in its own
bench-only virtualenv, see bench/_peers.py). It prints each row's ratio to direct per mode, the CPU
each proxy and the upstream spent per call, and PASS / MISS against issue 12's targets.

    python bench/gateway.py [--quick] [--json] [--protocol mcp|rest] [--era legacy|2026-07-28] [--peers]
                            [--calls N] [--concurrency C] [--keep DIR] [--profile FILE] [--sample FILE]
                            [--fast-path on|off|both] [--fast-calls on|off]
                            [--upstream-protocol auto|newest|legacy|2026-07-28] [--auth key|jwt|both]

``--auth both`` calls the same gateway a second way in the same rounds, row ``gateway-jwt``: with an
identity provider's access token (RS256, keys served by a made-up IdP, bench/_idp.py) instead of the
API key, and prints the two side by side.

Run it from the repository root with the project's virtualenv active. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

sys.path.append(str(Path(__file__).resolve().parent))  # `_servers` also under `python -m bench.gateway`
from _idp import access_token, jwks, jwt_config, make_keys
from _peers import sampled, start_fastmcp_proxy, start_mcp_proxy
from _servers import (
    Process,
    Processes,
    describe,
    exit_on_sigterm,
    filesystem_of,
    loadavg,
    new_api_key,
    percentile,
    start_gateway,
    start_issuer,
    start_upstream,
    work_directory,
    write_gateway_config,
)

# (warm-up calls per target, sequential calls per target, concurrent calls per target)
FULL = (100, 1_000, 2_000)
QUICK = (10, 60, 160)
WORKERS = 32  # calls in flight in the concurrent mode (issue 12 measures at 32)
CHUNK = 100  # sequential calls per target per round; rounds alternate direct and gateway
CALL_TIMEOUT_S = 30.0

# Issue 12's targets, checked as PASS / MISS lines (not failures).
GOAL_MCP_HOP_RATIO = 1.5  # MCP p50 through the gateway ÷ direct, sequential, each era
GOAL_MCP_THROUGHPUT_RATIO = 0.67  # MCP calls/s through the gateway ÷ direct, concurrent, each era
GOAL_REST_HOP_RATIO = 1.3  # REST invoke p50 ÷ calling the HTTP service directly
GOAL_GATEWAY_CPU_MS = 1.5  # gateway CPU per call, each protocol
GOAL_UPSTREAM_CPU_RATIO = 1.1  # upstream CPU per call behind the gateway ÷ direct
# Issue 20: the hop is not slower with JWT auth than with API keys (``--auth both``; 5% for this machine's noise).
GOAL_JWT_HOP_RATIO = 1.05  # p50 with a token ÷ p50 with a key, sequential
GOAL_JWT_THROUGHPUT_RATIO = 0.95  # calls/s with a token ÷ with a key, concurrent
ERAS = ("legacy", "2026-07-28")  # the MCP client's mode: the 2025-11-25 handshake era, and 2026-07-28
ERA_TAG = {"legacy": "l", "2026-07-28": "m", "": "r"}  # in call ids (seq.l-17), so the audit log tells eras apart

CALL_ID_META = "gateway/call_id"  # where an MCP client names its call (gateway/frontends/mcp.py)
MCP_TOOL = "tools_echo"  # upstream "tools", tool "echo"
REST_TOOL = "api_echo"  # upstream "api", tool "echo"

# A small, realistic policy (issue 12): a reject on a string pattern in any argument, a budget and
# an approval that does not fire; the benchmarked tool matches the first rule; every rule is evaluated.
POLICY: dict[str, Any] = {
    "policy": "bench",
    "description": "Guardrails of the kind a team starts with; the echo tools are read-only.",
    "variables": [{"name": "is_admin", "expression": '"admins" in principal.groups'}],
    "rules": [
        {"id": "allow-read-only", "when": "tool.annotations.readOnlyHint == true", "action": "allow"},
        {"id": "no-secrets-in-any-argument", "action": "reject",
         "when": 'args.exists(k, type(args[k]) == string && args[k].matches("(?i)password|AKIA[0-9A-Z]{16}"))',
         "message": "Do not send secrets to tools."},
        {"id": "deletes-need-approval", "action": "approve",
         "when": "!tool.annotations.readOnlyHint && tool.annotations.destructiveHint && !variables.is_admin",
         "message": "Deleting needs a person's approval.",
         "approval": {"approvers": ["group:admins"], "timeout": "10m"}},
        {"id": "call-budget", "action": "terminate", "when": "session.calls >= env.max_calls_per_session",
         "message": "This session has used its tool-call budget."},
    ],
}


class BenchmarkError(Exception):
    """A call did not return what it should: the benchmark would measure the wrong thing."""


# One call of the echo tool, named by its call id (``seq-17``): the gateway writes the id into its
# audit log, which is how the breakdown below tells the modes apart. The id is also the text echoed.
Call = Callable[[str], Awaitable[None]]


@dataclass
class Target:
    """One way of calling the echo tool, and what it cost while measured."""

    protocol: str  # mcp | rest
    via: str  # direct | gateway | fastmcp-proxy | mcp-proxy
    call: Call
    era: str = ""  # MCP: the client's mode (legacy | 2026-07-28); REST: ""
    proxy: str | None = None  # the process that stands between client and upstream, if any
    upstream: str = "mcp upstream"
    errors: int = 0
    first_errors: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # process name → CPU seconds while measured
    tag: str = ""  # more of the call ids' tag (gateway-jwt: "j", so the audit breakdown keeps to the key's calls)

    async def timed(self, call_id: str, samples: list[float]) -> None:
        """One call, its latency appended to ``samples``; a failure is counted instead."""
        started = time.perf_counter()
        try:
            await asyncio.wait_for(self.call(call_id), CALL_TIMEOUT_S)
        except Exception as exc:  # counted and reported; the run goes on so the figures still print
            self.errors += 1
            if len(self.first_errors) < 3:
                self.first_errors.append(describe(exc))
            return
        samples.append(time.perf_counter() - started)

    def reset(self) -> None:
        """Forget errors and CPU before the next mode."""
        self.errors, self.first_errors, self.cpu = 0, [], {}


@dataclass
class Row:
    """One measured (protocol, target, mode)."""

    protocol: str
    era: str
    via: str
    mode: str  # sequential | concurrent
    calls: int
    workers: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    calls_per_s: float
    errors: int
    first_errors: list[str]
    cpu_ms_per_call: dict[str, float]
    proxy_cpu_ms: float | None  # CPU per call of the process between client and upstream
    upstream_cpu_ms: float | None


class CpuMeter:
    """CPU seconds spent by the benchmark itself and each server process, between marks."""

    def __init__(self, processes: Sequence[Process]) -> None:
        self.processes = processes

    def read(self) -> dict[str, float]:
        """Current CPU totals by process name ("client" is this process)."""
        out = {"client": time.process_time()}
        for p in self.processes:
            seconds = p.cpu_seconds()
            if seconds is not None:
                out[p.name] = seconds
        return out

    @staticmethod
    def add(into: dict[str, float], before: dict[str, float], after: dict[str, float]) -> None:
        """Add the CPU used between two readings."""
        for name, value in after.items():
            into[name] = into.get(name, 0.0) + value - before.get(name, value)


# ---------------------------------------------------------------------------------------------
# Clients


def mcp_call(client: Client, tool: str) -> Call:
    """Call ``tool`` over one MCP session and check the echo."""

    async def call(call_id: str) -> None:
        text = call_id
        meta = cast(RequestParamsMeta, {CALL_ID_META: call_id})  # a TypedDict open to extra keys
        result = await client.call_tool(tool, {"text": text}, meta=meta)
        block = result.content[0] if result.content else None
        if result.is_error or getattr(block, "text", None) != text:
            raise BenchmarkError(f"{tool}: expected the echo {text!r}, got {result.model_dump(exclude_none=True)}")

    return call


def rest_direct_call(http: httpx2.AsyncClient, url: str) -> Call:
    """POST the upstream's /echo and check the echo."""

    async def call(call_id: str) -> None:
        text = call_id
        response = await http.post(url, json={"text": text})
        if response.status_code != 200 or response.json() != {"text": text}:
            raise BenchmarkError(f"{url}: HTTP {response.status_code} {response.text[:300]}")

    return call


def rest_gateway_call(http: httpx2.AsyncClient, url: str) -> Call:
    """Invoke the tool through the gateway's REST API and check the decision and the echo."""

    async def call(call_id: str) -> None:
        text = call_id
        response = await http.post(url, json={"arguments": {"text": text}, "call_id": call_id})
        body = response.json() if response.status_code == 200 else None
        if body is None or body.get("decision") != "allow" or body.get("structured") != {"text": text}:
            raise BenchmarkError(f"{url}: HTTP {response.status_code} {response.text[:300]}")

    return call


def http_client(workers: int, headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """A client whose pool holds every worker's connection (and the MCP GET stream) open."""
    size = workers + 4
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(CALL_TIMEOUT_S),
                              limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size))


# ---------------------------------------------------------------------------------------------
# Measurement


async def measure_sequential(targets: Sequence[Target], warmup: int, calls: int, meter: CpuMeter,
                             ) -> dict[str, list[float]]:
    """``calls`` timed calls per target, one at a time, in alternating rounds of ``CHUNK``.

    Alternating spreads any background load over direct and gateway alike, so their ratio
    stays fair even when the absolute figures are noisy; every other round runs the targets in reverse
    order, so that none always follows another (gateway-jwt right after gateway, say).
    """
    samples: dict[str, list[float]] = {}
    for t in targets:
        samples[t.via] = []
        for i in range(warmup):
            await t.call(f"warm-{i}")  # a failure here is a broken setup: let it raise
    done = dict.fromkeys(samples, 0)
    rounds = 0
    while any(n < calls for n in done.values()):
        rounds += 1  # every other round in reverse order: no target always runs right after another
        for t in targets if rounds % 2 else list(reversed(targets)):
            count = min(CHUNK, calls - done[t.via])
            before = meter.read()
            for i in range(done[t.via], done[t.via] + count):
                await t.timed(f"seq.{ERA_TAG[t.era]}{t.tag}-{i}", samples[t.via])
            CpuMeter.add(t.cpu, before, meter.read())
            done[t.via] += count
    return samples


async def measure_concurrent(target: Target, calls: int, workers: int, meter: CpuMeter, tag: str = "conc",
                             ) -> tuple[list[float], float]:
    """``calls`` calls spread over ``workers`` tasks; (latencies, wall seconds)."""
    samples: list[float] = []
    indices = iter(range(calls))  # shared: each worker takes the next index until none are left

    async def worker() -> None:
        for i in indices:
            await target.timed(f"{tag}-{i}", samples)

    before = meter.read()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall = time.perf_counter() - started
    CpuMeter.add(target.cpu, before, meter.read())
    return samples, wall


def summarize(target: Target, mode: str, samples: list[float], workers: int, wall: float | None,
              calls: int) -> Row:
    """The row for one target in one mode (CPU per call counts every call attempted)."""
    ordered = sorted(samples) or [float("nan")]
    mean = sum(ordered) / len(ordered)
    rate = len(samples) / wall if wall else (1 / mean if samples else 0.0)
    cpu = {name: round(seconds * 1e3 / calls, 3) for name, seconds in target.cpu.items()}
    return Row(target.protocol, target.era, target.via, mode, len(samples), workers,
               round(percentile(ordered, 0.5) * 1e3, 3), round(percentile(ordered, 0.99) * 1e3, 3),
               round(mean * 1e3, 3), round(rate, 1), target.errors, target.first_errors, cpu,
               cpu.get(target.proxy) if target.proxy else None, cpu.get(target.upstream))


async def run(directory: Path, processes: Processes, warmup: int, calls: int, concurrent_calls: int,
              workers: int, protocols: Sequence[str] = ("mcp", "rest"), profile: Path | None = None,
              eras: Sequence[str] = ERAS, peers: bool = False, fast_path: str = "on",
              mcp_options: dict[str, Any] | None = None, sample: Path | None = None, auth_mode: str = "key",
              ) -> list[Row]:
    """Start everything, measure every mode, return the rows (``mcp_options``: more of the MCP upstream's `mcp:`;
    ``auth_mode``: how the gateway is called, with the API key, an IdP's token, or both side by side)."""
    mcp_upstream = start_upstream(processes, "mcp", directory)
    http_upstream = start_upstream(processes, "http", directory)
    key, digest = new_api_key()
    issuers, token = identity_provider(processes, directory) if auth_mode != "key" else ([], "")
    gateway_config: dict[str, Any] = dict(
        upstreams=[
            {"name": "tools", "mcp": {"url": f"{mcp_upstream.url}/mcp", **(mcp_options or {})}},
            {"name": "api", "http": {"base_url": http_upstream.url, "tools": [
                {"name": "echo", "description": "Return the text unchanged.", "method": "POST", "path": "/echo",
                 "input_schema": {"type": "object", "properties": {"text": {"type": "string"}},
                                  "required": ["text"]},
                 "annotations": {"readOnlyHint": True, "destructiveHint": False}}]}},
        ],
        policy=POLICY,
        api_keys=[{"principal": {"id": "bench-agent", "groups": ["developers"]}, "sha256": digest}],
        env={"max_calls_per_session": 100_000_000},
        jwt=issuers,
    )
    config = write_gateway_config(directory, **gateway_config)
    if fast_path == "off":  # the SDK's server path for every tools/call (gateway/frontends/mcp_fast.py off)
        _sdk_path_only(config)
    gateway = start_gateway(processes, config, profile=profile)
    # --fast-path both: a second gateway, the SDK path only, measured in the same rounds as "gateway-sdk-path"
    sdk_gateway: Process | None = None
    if fast_path == "both" and "mcp" in protocols:
        (directory / "sdk-path").mkdir()
        sdk_config = write_gateway_config(directory / "sdk-path", **gateway_config)
        _sdk_path_only(sdk_config)
        sdk_gateway = start_gateway(processes, sdk_config, name="gateway-sdk-path")
    peer_processes: dict[tuple[str, str], Process] = {}
    if peers and "mcp" in protocols:
        upstream_url = f"{mcp_upstream.url}/mcp"
        for era in eras:
            peer_processes[("fastmcp-proxy", era)] = start_fastmcp_proxy(processes, upstream_url, directory, era)
        if "legacy" in eras:  # mcp-proxy's server (MCP SDK 1.x) speaks only the handshake era
            peer_processes[("mcp-proxy", "legacy")] = start_mcp_proxy(processes, upstream_url, directory)
    meter = CpuMeter([gateway, mcp_upstream, http_upstream, *peer_processes.values(),
                      *([sdk_gateway] if sdk_gateway else [])])
    auth = {"Authorization": f"Bearer {token if auth_mode == 'jwt' else key}"}
    with_token = {"Authorization": f"Bearer {token}"} if auth_mode == "both" else None
    rows: list[Row] = []

    async with contextlib.AsyncExitStack() as stack:
        async def mcp_client(url: str, era: str, headers: dict[str, str] | None = None) -> Client:
            http = await stack.enter_async_context(http_client(workers, headers))
            return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http), mode=era))

        suites: list[list[Target]] = []
        if "mcp" in protocols:
            for era in eras:
                suite = [Target("mcp", "direct", mcp_call(await mcp_client(f"{mcp_upstream.url}/mcp", era), "echo"),
                                era),
                         Target("mcp", "gateway", mcp_call(await mcp_client(f"{gateway.url}/mcp", era, auth), MCP_TOOL),
                                era, gateway.name)]
                if with_token is not None:
                    suite.append(Target("mcp", "gateway-jwt", mcp_call(
                        await mcp_client(f"{gateway.url}/mcp", era, with_token), MCP_TOOL), era, gateway.name, tag="j"))
                if sdk_gateway is not None:
                    suite.append(Target("mcp", sdk_gateway.name, mcp_call(
                        await mcp_client(f"{sdk_gateway.url}/mcp", era, auth), MCP_TOOL), era, sdk_gateway.name))
                for (peer, peer_era), process in peer_processes.items():
                    if peer_era == era:
                        suite.append(Target("mcp", peer, mcp_call(await mcp_client(f"{process.url}/mcp", era), "echo"),
                                            era, process.name))
                suites.append(suite)
        if "rest" in protocols:
            suites.append(await rest_suite(stack, workers, http_upstream, gateway, auth, with_token))
        spying = sampled(gateway.popen.pid, sample) if sample else contextlib.nullcontext()
        with spying:  # the gateway's stacks while it serves the measured calls (not its start)
            for targets in suites:
                await measure_suite(targets, warmup, calls, concurrent_calls, workers, meter, rows)
    return rows


async def rest_suite(stack: contextlib.AsyncExitStack, workers: int, upstream: Process, gateway: Process,
                     auth: dict[str, str], with_token: dict[str, str] | None) -> list[Target]:
    """REST direct and through the gateway (and, with ``with_token``, through it with the token: gateway-jwt)."""
    invoke = f"{gateway.url}/v1/tools/{REST_TOOL}/invoke"
    suite = [Target("rest", "direct", rest_direct_call(await stack.enter_async_context(http_client(workers)),
                                                       f"{upstream.url}/echo"), upstream=upstream.name),
             Target("rest", "gateway", rest_gateway_call(await stack.enter_async_context(http_client(workers, auth)),
                                                         invoke), proxy=gateway.name, upstream=upstream.name)]
    if with_token is not None:
        http = await stack.enter_async_context(http_client(workers, with_token))
        suite.append(Target("rest", "gateway-jwt", rest_gateway_call(http, invoke), proxy=gateway.name,
                            upstream=upstream.name, tag="j"))
    return suite


def identity_provider(processes: Processes, directory: Path) -> tuple[list[dict[str, Any]], str]:
    """A made-up IdP whose JWKS the gateway fetches once, at start: its ``auth.jwt`` entry, and a token of it."""
    signing = make_keys(("RS256",))
    issuer = start_issuer(processes, jwks(signing), directory).url
    return [jwt_config(issuer, f"{issuer}/jwks", ("RS256",))], access_token(signing["RS256"], issuer)


async def measure_suite(targets: Sequence[Target], warmup: int, calls: int, concurrent_calls: int, workers: int,
                        meter: CpuMeter, rows: list[Row]) -> None:
    """One suite's sequential rounds, then each target's concurrent run; their rows are added to ``rows``."""
    samples = await measure_sequential(targets, warmup, calls, meter)
    rows.extend(summarize(t, "sequential", samples[t.via], 1, None, calls) for t in targets)
    for t in targets:
        await measure_concurrent(t, warmup, workers, meter, "warm")  # open `workers` connections first
        t.reset()
        got, wall = await measure_concurrent(t, concurrent_calls, workers, meter, f"conc.{ERA_TAG[t.era]}{t.tag}")
        rows.append(summarize(t, "concurrent", got, workers, wall, concurrent_calls))


def _sdk_path_only(config: Path) -> None:
    """The gateway config with the lean tools/call path off (``mcp.fast_path: false``)."""
    config.write_text(config.read_text() + "mcp:\n  fast_path: false\n")


def median(values: list[float]) -> float:
    """The nearest-rank median."""
    return percentile(sorted(values), 0.5)


def audit_breakdown(audit: Path, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Where the gateway's time goes, per (protocol, era, mode), from its own audit log (medians).

    ``policy_us`` is the policy decision; ``upstream_ms`` the upstream leg (the gateway's client,
    the wire, the upstream); ``pipeline_ms`` the rest of ``Gateway.call`` (policy, schema check,
    session, audit); ``total_ms`` all of it. What the client saw through the gateway minus
    ``total_ms`` is the client's round trip to the gateway (``client_gateway_ms``: the client, the
    wire, and the gateway's HTTP server and MCP or REST frontend), which compares with a direct call.
    """
    groups: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    modes = {"seq": "sequential", "conc": "concurrent"}
    eras = {tag: era for era, tag in ERA_TAG.items()}
    for line in audit.read_text().splitlines() if audit.exists() else []:
        event = json.loads(line)
        if event.get("event") != "call.outcome":  # intents and reloads carry no timings
            continue
        mode, _, tag = str(event.get("call_id", "")).split("-", 1)[0].partition(".")
        if mode in modes and tag in eras and event["latency"]["upstream_ms"] is not None:
            groups.setdefault((event["frontend"], eras[tag], modes[mode]), []).append(event["latency"])
    seen = {(r.protocol, r.era, r.mode): r.p50_ms for r in rows if r.via == "gateway"}
    out = []
    for (protocol, era, mode), latencies in groups.items():
        total = median([x["total_ms"] for x in latencies])
        out.append({
            "protocol": protocol, "era": era, "mode": mode, "events": len(latencies),
            "policy_us": round(median([x["policy_us"] for x in latencies]), 1),
            "pipeline_ms": round(median([x["total_ms"] - x["upstream_ms"] for x in latencies]), 3),
            "upstream_ms": round(median([x["upstream_ms"] for x in latencies]), 3),
            "total_ms": round(total, 3),
            "client_gateway_ms": round(seen[(protocol, era, mode)] - total, 3)
            if (protocol, era, mode) in seen else None,
        })
    return out


# ---------------------------------------------------------------------------------------------
# Report


def ratios(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Each proxy over direct for each (protocol, era, mode), with CPU per call beside it."""
    by_key = {(r.protocol, r.era, r.mode, r.via): r for r in rows}
    out = []
    for r in rows:
        d = by_key.get((r.protocol, r.era, r.mode, "direct"))
        if r.via == "direct" or d is None or not (d.p50_ms and r.calls and d.calls):
            continue
        out.append({"protocol": r.protocol, "era": r.era, "mode": r.mode, "via": r.via,
                    "p50_ratio": round(r.p50_ms / d.p50_ms, 2), "p99_ratio": round(r.p99_ms / d.p99_ms, 2),
                    "added_p50_ms": round(r.p50_ms - d.p50_ms, 3),
                    "throughput_ratio": round(r.calls_per_s / d.calls_per_s, 2),
                    "proxy_cpu_ms": r.proxy_cpu_ms, "upstream_cpu_ms": r.upstream_cpu_ms,
                    "direct_upstream_cpu_ms": d.upstream_cpu_ms})
    return out


def token_vs_key(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """``--auth both``: the gateway called with a token over the same gateway called with the key, per mode."""
    by_key = {(r.protocol, r.era, r.mode, r.via): r for r in rows}
    out = []
    for r in rows:
        k = by_key.get((r.protocol, r.era, r.mode, "gateway"))
        if r.via != "gateway-jwt" or k is None or not (k.p50_ms and k.calls_per_s and r.calls):
            continue
        cpu = None if r.proxy_cpu_ms is None or k.proxy_cpu_ms is None else round(r.proxy_cpu_ms - k.proxy_cpu_ms, 3)
        out.append({"protocol": r.protocol, "era": r.era, "mode": r.mode, "p50_ratio": round(r.p50_ms / k.p50_ms, 3),
                    "added_p50_ms": round(r.p50_ms - k.p50_ms, 3),
                    "throughput_ratio": round(r.calls_per_s / k.calls_per_s, 3), "added_gateway_cpu_ms": cpu})
    return out


def goals(rows: Sequence[Row], ratio_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 12's targets for the gateway, and issue 20's for a token beside a key, each PASS or MISS."""
    out = []

    def check(goal: str, value: float | None, ok: bool, text: str) -> None:
        if value is not None:
            out.append({"goal": goal, "value": value, "result": "PASS" if ok else "MISS", "text": text})

    for x in ratio_rows:
        if x["via"] != "gateway":
            continue
        label = f"{x['protocol'].upper()} {x['era'] or ''} {x['mode']}".replace("  ", " ")
        if x["protocol"] == "mcp" and x["mode"] == "sequential":
            check("mcp_hop", x["p50_ratio"], x["p50_ratio"] <= GOAL_MCP_HOP_RATIO,
                  f"{label}: p50 {x['p50_ratio']:.2f}x direct (target <= {GOAL_MCP_HOP_RATIO}x)")
        if x["protocol"] == "mcp" and x["mode"] == "concurrent":
            check("mcp_throughput", x["throughput_ratio"], x["throughput_ratio"] >= GOAL_MCP_THROUGHPUT_RATIO,
                  f"{label}: calls/s {x['throughput_ratio']:.2f}x direct (target >= {GOAL_MCP_THROUGHPUT_RATIO}x)")
        if x["protocol"] == "rest" and x["mode"] == "sequential":
            check("rest_hop", x["p50_ratio"], x["p50_ratio"] <= GOAL_REST_HOP_RATIO,
                  f"{label}: invoke p50 {x['p50_ratio']:.2f}x direct (target <= {GOAL_REST_HOP_RATIO}x)")
        if x["mode"] == "concurrent" and x["proxy_cpu_ms"] is not None:
            check("gateway_cpu", x["proxy_cpu_ms"], x["proxy_cpu_ms"] <= GOAL_GATEWAY_CPU_MS,
                  f"{label}: gateway CPU {x['proxy_cpu_ms']:.2f} ms/call (target <= {GOAL_GATEWAY_CPU_MS} ms)")
        behind, direct = x["upstream_cpu_ms"], x["direct_upstream_cpu_ms"]
        if x["protocol"] == "mcp" and x["mode"] == "concurrent" and behind and direct:
            ratio = round(behind / direct, 2)
            check("upstream_cpu", ratio, ratio <= GOAL_UPSTREAM_CPU_RATIO,
                  f"{label}: upstream CPU behind the gateway {ratio:.2f}x direct"
                  f" (target <= {GOAL_UPSTREAM_CPU_RATIO}x)")
    for x in token_vs_key(rows):
        label = f"{x['protocol'].upper()} {x['era'] or ''} {x['mode']}".replace("  ", " ")
        if x["mode"] == "sequential":
            check("jwt_hop", x["p50_ratio"], x["p50_ratio"] <= GOAL_JWT_HOP_RATIO,
                  f"{label}: p50 with a token {x['p50_ratio']:.2f}x with a key (target <= {GOAL_JWT_HOP_RATIO}x)")
        else:
            check("jwt_throughput", x["throughput_ratio"], x["throughput_ratio"] >= GOAL_JWT_THROUGHPUT_RATIO,
                  f"{label}: calls/s with a token {x['throughput_ratio']:.2f}x with a key"
                  f" (target >= {GOAL_JWT_THROUGHPUT_RATIO}x)")
    return out


def print_report(rows: Sequence[Row], ratio_rows: Sequence[dict[str, Any]], goal_rows: Sequence[dict[str, Any]],
                 breakdown: Sequence[dict[str, Any]], environment: dict[str, Any]) -> None:
    """The human-readable report."""
    print(f"{environment['cpus']} CPUs, Python {environment['python']}, work dir on {environment['filesystem']};"
          f" gateway log level {environment['gateway_log_level']}; lean tools/call path {environment['fast_path']};"
          f" load average {environment['loadavg_before']} before, {environment['loadavg_after']} after;"
          f" MCP upstream: fast_calls {environment['mcp_upstream']['fast_calls']},"
          f" protocol {environment['mcp_upstream']['protocol']}")
    print("(a shared machine: compare the ratios within this run, not absolute figures across runs)")
    print()
    print(f"{'protocol':<8} {'era':<10} {'via':<13} {'mode':<11} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8}"
          f" {'calls/s':>8} {'errors':>6}   CPU ms/call: client / proxy / upstream")
    for r in rows:
        mode = r.mode if r.mode == "sequential" else f"conc x{r.workers}"
        proxy = "—" if r.proxy_cpu_ms is None else f"{r.proxy_cpu_ms:.2f}"
        upstream = "—" if r.upstream_cpu_ms is None else f"{r.upstream_cpu_ms:.2f}"
        print(f"{r.protocol:<8} {r.era or '—':<10} {r.via:<13} {mode:<11} {r.calls:>6} {r.p50_ms:>8.2f}"
              f" {r.p99_ms:>8.2f} {r.calls_per_s:>8,.0f} {r.errors:>6}   "
              f"{r.cpu_ms_per_call.get('client', 0.0):.2f} / {proxy} / {upstream}")
    print()
    for x in ratio_rows:
        print(f"{x['protocol'].upper():<4} {x['era'] or '—':<10} {x['mode']:<10} {x['via']:<13}:"
              f" p50 {x['p50_ratio']:.2f}x direct (+{x['added_p50_ms']:.2f} ms), p99 {x['p99_ratio']:.2f}x,"
              f" calls/s {x['throughput_ratio']:.2f}x")
    versus = token_vs_key(rows)
    if versus:
        print()
        print("the same gateway with an IdP's token (gateway-jwt) over with the API key (gateway), same rounds:")
        for x in versus:
            cpu = "—" if x["added_gateway_cpu_ms"] is None else f"{x['added_gateway_cpu_ms']:+.3f}"
            print(f"{x['protocol'].upper():<4} {x['era'] or '—':<10} {x['mode']:<10}: p50 {x['p50_ratio']:.3f}x"
                  f" ({x['added_p50_ms']:+.3f} ms), calls/s {x['throughput_ratio']:.3f}x, gateway CPU {cpu} ms/call")
    if breakdown:
        print()
        print("inside the gateway, from its audit log (medians; client<->gateway = client-seen p50 - total):")
        print(f"{'protocol':<8} {'era':<10} {'mode':<11} {'policy µs':>9} {'pipeline ms':>11} {'upstream ms':>11}"
              f" {'total ms':>9} {'client<->gateway ms':>19}")
        for b in breakdown:
            rest = "" if b["client_gateway_ms"] is None else f"{b['client_gateway_ms']:.2f}"
            print(f"{b['protocol']:<8} {b['era'] or '—':<10} {b['mode']:<11} {b['policy_us']:>9.0f}"
                  f" {b['pipeline_ms']:>11.2f} {b['upstream_ms']:>11.2f} {b['total_ms']:>9.2f} {rest:>19}")
    print()
    for g in goal_rows:
        print(f"{g['result']}  {g['text']}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 2 when calls failed or returned the wrong thing."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls, for a smoke run (< 20 s)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write the config, logs, audit file and SQLite to DIR and keep them")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="run the gateway under cProfile and write its stats to FILE (slows it down)")
    parser.add_argument("--sample", type=Path, metavar="FILE",
                        help="sample the gateway with py-spy while it serves the measured calls (it is not slowed"
                             " down) and write the stacks to FILE (installs py-spy into bench/.venv-peers)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--calls", type=int, help="sequential calls per target (concurrent: twice this)")
    parser.add_argument("--concurrency", type=int, default=WORKERS, help=f"concurrent workers (default {WORKERS})")
    parser.add_argument("--protocol", choices=("both", "mcp", "rest"), default="both", help="measure only one")
    parser.add_argument("--era", choices=("both", *ERAS), default="both", help="MCP protocol era(s) to measure")
    parser.add_argument("--peers", action="store_true",
                        help="also measure a FastMCP proxy and mcp-proxy (installs them into bench/.venv-peers)")
    parser.add_argument("--fast-path", choices=("on", "off", "both"), default="on",
                        help="the gateway's lean tools/call path (config mcp.fast_path); both: a second gateway"
                             " with it off, measured in the same rounds (row gateway-sdk-path)")
    parser.add_argument("--fast-calls", choices=("on", "off"), default="on",
                        help="the MCP upstream's mcp.fast_calls (off: every upstream call through the SDK's client)")
    parser.add_argument("--upstream-protocol", choices=("auto", "newest", "legacy", "2026-07-28"), default="auto",
                        help="the MCP upstream's mcp.protocol (the era the gateway speaks to it)")
    parser.add_argument("--auth", choices=("key", "jwt", "both"), default="key",
                        help="call the gateway with the API key, an IdP's access token (auth.jwt), or both side by"
                             " side in the same rounds (row gateway-jwt)")
    args = parser.parse_args(argv)
    warmup, calls, concurrent_calls = QUICK if args.quick else FULL
    if args.calls:
        calls, concurrent_calls = args.calls, 2 * args.calls
    workers = max(1, args.concurrency)

    exit_on_sigterm()
    processes = Processes()
    started = time.perf_counter()
    try:
        with work_directory(args.keep, "bench-gateway-") as directory:
            environment: dict[str, Any] = {
                "python": sys.version.split()[0], "cpus": os.cpu_count(), "filesystem": filesystem_of(directory),
                "gateway_log_level": "warning", "fast_path": args.fast_path, "auth": args.auth,
                "loadavg_before": loadavg(),
                "mcp_upstream": {"fast_calls": args.fast_calls, "protocol": args.upstream_protocol}}
            try:
                protocols = ("mcp", "rest") if args.protocol == "both" else (args.protocol,)
                eras = ERAS if args.era == "both" else (args.era,)
                rows = asyncio.run(run(directory, processes, warmup, calls, concurrent_calls, workers, protocols,
                                       args.profile, eras, args.peers, args.fast_path,
                                       {"fast_calls": args.fast_calls == "on", "protocol": args.upstream_protocol},
                                       args.sample, args.auth))
            finally:
                processes.stop_all()
            breakdown = audit_breakdown(directory / "audit.jsonl", rows)
            errors = {f"{r.protocol}/{r.era}/{r.via}/{r.mode}": (r.errors, r.first_errors) for r in rows if r.errors}
            if errors:
                print(f"error: calls failed: {errors}; gateway log:\n"
                      f"{(directory / 'gateway.log').read_text(errors='replace')[-2000:]}", file=sys.stderr)
    except Exception as exc:  # a server that did not start, a broken call in the warm-up (maybe grouped)
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 2
    ratio_rows = ratios(rows)
    goal_rows = goals(rows, ratio_rows)
    environment["seconds"] = round(time.perf_counter() - started, 1)
    environment["loadavg_after"] = loadavg()
    if args.json:
        print(json.dumps({"quick": args.quick, "environment": environment,
                          "settings": {"warmup": warmup, "sequential_calls": calls,
                                       "concurrent_calls": concurrent_calls, "workers": workers},
                          "results": [asdict(r) for r in rows], "ratios": ratio_rows, "goals": goal_rows,
                          "token_vs_key": token_vs_key(rows),
                          "audit_breakdown": breakdown}, indent=2))
    else:
        print_report(rows, ratio_rows, goal_rows, breakdown, environment)
        print(f"\n({environment['seconds']:.0f} s)")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
