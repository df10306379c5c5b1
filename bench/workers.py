"""One gateway process against ``gateway serve --workers 2``, on SQLite and on PostgreSQL.

A Starlette app with ``POST /echo`` runs in a subprocess on 127.0.0.1 (bench/_servers.py), and a
throwaway PostgreSQL cluster is started with initdb and pg_ctl (tests/postgres_cluster.py; as root
it runs as the ``postgres`` user). Four gateways then run side by side, each a ``gateway serve``
subprocess with bench/gateway.py's four-rule policy, an audit file and an API key, fronting that
upstream as the REST tool ``api_echo``:

* ``sqlite x1``: one process, SQLite (the default set-up);
* ``sqlite x2``: ``--workers 2`` on one SQLite file (marked shared: each call's counts are written
  before it answers);
* ``postgres x1`` and ``postgres x2``: the same on one PostgreSQL database each.

Each is driven with concurrent REST invokes (C calls in flight over C keep-alive connections) in
alternating rounds, so background load on a shared machine hits all four alike; it prints calls/s,
p50 / p99, the CPU each party spent per call, and the ratio of two workers to one per backend.

    python bench/workers.py [--quick] [--json] [--backend sqlite|postgres] [--rounds R] [--calls N]
                            [--concurrency C] [--keep DIR]

Run it from the repository root with the project's virtualenv active. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.append(str(BENCH_DIR))  # `_servers` also under `python -m bench.workers`
sys.path.append(str(BENCH_DIR.parent / "tests"))  # the throwaway PostgreSQL cluster the tests use
from _servers import (  # noqa: E402
    Process,
    Processes,
    _children,  # per-process CPU from /proc, for the PostgreSQL server
    _proc_cpu,
    describe,
    exit_on_sigterm,
    loadavg,
    new_api_key,
    percentile,
    raise_fd_limit,
    start_upstream,
    work_directory,
    write_gateway_config,
)
from postgres_cluster import Cluster, running_cluster  # noqa: E402


def _bench_gateway() -> ModuleType:
    """bench/gateway.py, by path: its name would otherwise resolve to the `gateway` package."""
    spec = importlib.util.spec_from_file_location("bench_gateway", BENCH_DIR / "gateway.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


hop = _bench_gateway()

# (calls per configuration per round, rounds)
FULL = (1_000, 4)
QUICK = (100, 2)
CONCURRENCY = 32  # calls in flight, as in bench/gateway.py's concurrent mode
BACKENDS = ("sqlite", "postgres")
PROCESS_COUNTS = (1, 2)
CLIENT_KEEPALIVE_S = 2.0  # below uvicorn's 5 s keep-alive timeout, so the client never reuses a closing connection


@dataclass
class Config:
    """One gateway set-up: a backend and a process count, and what it measured."""

    backend: str
    workers: int
    process: Process
    target: Any  # bench/gateway.py's Target
    samples: list[float]
    wall: float = 0.0
    worker_cpu_s: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``sqlite x2``."""
        return f"{self.backend} x{self.workers}"


@dataclass
class Row:
    """One configuration's result over every round."""

    backend: str
    workers: int
    calls: int
    errors: int
    first_errors: list[str]
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_call: dict[str, float]  # client / gateway (all its processes) / upstream / PostgreSQL server
    worker_cpu_s: list[float]  # with workers: each worker's CPU seconds over the whole run (is the load shared?)


def start_gateway(processes: Processes, config: Path, name: str, workers: int) -> Process:
    """``gateway serve CONFIG [--workers N]`` at log level warning (no access log in the timings)."""
    port = yaml.safe_load(config.read_text())["listen"]["port"]
    argv = [sys.executable, "-m", "gateway", "serve", str(config), "--log-level", "warning"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    return processes.spawn(name, argv, config.parent / "gateway.log", f"http://127.0.0.1:{port}")


def gateway_config(directory: Path, upstream_url: str, digest: str, store: dict[str, Any] | None) -> Path:
    """bench/gateway.py's REST set-up in ``directory``; ``store`` replaces SQLite when given."""
    directory.mkdir(parents=True, exist_ok=True)
    path = write_gateway_config(
        directory,
        upstreams=[{"name": "api", "http": {"base_url": upstream_url, "tools": [
            {"name": "echo", "description": "Return the text unchanged.", "method": "POST", "path": "/echo",
             "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
             "annotations": {"readOnlyHint": True, "destructiveHint": False}}]}}],
        policy=hop.POLICY,
        api_keys=[{"principal": {"id": "bench-agent", "groups": ["developers"]}, "sha256": digest}],
        env={"max_calls_per_session": 100_000_000},
    )
    if store is not None:
        document = yaml.safe_load(path.read_text())
        document["store"] = store
        path.write_text(yaml.safe_dump(document, sort_keys=False, width=200))
    return path


def http_client(concurrency: int, headers: dict[str, str]) -> httpx2.AsyncClient:
    """bench/gateway.py's client, dropping idle connections before the server would (uvicorn: after 5 s).

    A configuration's connections sit idle while the others are measured; reusing one the server is
    closing at that moment fails the call (a ReadError) for a reason that is not the gateway's.
    """
    size = concurrency + 4
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(hop.CALL_TIMEOUT_S),
                              limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size,
                                                   keepalive_expiry=CLIENT_KEEPALIVE_S))


@dataclass
class Postmaster:
    """The PostgreSQL server (postmaster and its backends), metered like the other processes."""

    pid: int
    name: str = "postgres"

    @classmethod
    def of(cls, cluster: Cluster) -> Postmaster | None:
        """The cluster's postmaster, found by the port on its command line (Linux /proc), or None."""
        wanted = f"-p\0{cluster.port}\0".encode()
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and wanted in (entry / "cmdline").read_bytes():
                    return cls(int(entry.name))
        return None

    def cpu_seconds(self) -> float | None:
        """User + system CPU of the server and its live backends (each gateway connection is one)."""
        own = _proc_cpu(self.pid)
        return None if own is None else own + sum(_proc_cpu(pid) or 0.0 for pid in _children(self.pid))


@contextlib.contextmanager
def maybe_cluster(wanted: bool) -> Iterator[Cluster | None]:
    """A throwaway PostgreSQL cluster when ``wanted``."""
    if not wanted:
        yield None
        return
    with running_cluster() as cluster:
        yield cluster


async def measure(configs: Sequence[Config], meter: Any, per_round: int, rounds: int, concurrency: int) -> None:
    """Warm each configuration up, then ``rounds`` rounds of ``per_round`` concurrent calls each, in turn."""
    for c in configs:
        await hop.measure_concurrent(c.target, 2 * concurrency, concurrency, meter, "warm")  # open the connections
        if c.target.errors:
            raise RuntimeError(f"{c.name}: warm-up calls failed: {c.target.first_errors}\n{c.process.log_tail()}")
        c.target.reset()
    for r in range(rounds):
        # Alternate the order too, so that no configuration always follows the same one.
        for c in configs if r % 2 == 0 else reversed(configs):
            # Untimed: reopen the connections the client let expire while the others were measured.
            spent = dict(c.target.cpu)
            await hop.measure_concurrent(c.target, concurrency, concurrency, meter, "warm")
            c.target.cpu = spent
            got, wall = await hop.measure_concurrent(c.target, per_round, concurrency, meter, f"r{r}")
            c.samples.extend(got)
            c.wall += wall


def summarize(c: Config, attempted: int) -> Row:
    """The row for one configuration (CPU per call counts every call attempted)."""
    ordered = sorted(c.samples) or [float("nan")]
    cpu = {"client": c.target.cpu.get("client", 0.0), "gateway": c.target.cpu.get(c.process.name, 0.0),
           "upstream": c.target.cpu.get("http upstream", 0.0), "postgres": c.target.cpu.get("postgres", 0.0)}
    return Row(c.backend, c.workers, len(c.samples), c.target.errors, c.target.first_errors,
               round(len(c.samples) / c.wall, 1) if c.wall else 0.0,
               round(percentile(ordered, 0.5) * 1e3, 2), round(percentile(ordered, 0.99) * 1e3, 2),
               {k: round(v * 1e3 / attempted, 3) for k, v in cpu.items()}, c.worker_cpu_s)


def ratios(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Calls/s of N workers over one process, per backend."""
    by_key = {(r.backend, r.workers): r for r in rows}
    out = []
    for r in rows:
        one = by_key.get((r.backend, 1))
        if r.workers > 1 and one is not None and one.calls_per_s:
            out.append({"backend": r.backend, "workers": r.workers,
                        "throughput_ratio": round(r.calls_per_s / one.calls_per_s, 2)})
    return out


async def run(directory: Path, processes: Processes, cluster: Cluster | None, backends: Sequence[str],
              per_round: int, rounds: int, concurrency: int) -> list[Row]:
    """Start the upstream and the gateways, measure them in alternating rounds, return the rows."""
    upstream = start_upstream(processes, "http", directory)
    key, digest = new_api_key()
    auth = {"Authorization": f"Bearer {key}"}
    configs: list[Config] = []
    async with contextlib.AsyncExitStack() as stack:
        for backend in backends:
            for workers in PROCESS_COUNTS:
                name = f"{backend} x{workers}"
                store = {"postgres": {"dsn": cluster.new_database()}} if backend == "postgres" and cluster else None
                config = gateway_config(directory / name.replace(" ", "-"), upstream.url, digest, store)
                process = start_gateway(processes, config, f"gateway {name}", workers)
                http = await stack.enter_async_context(http_client(concurrency, auth))
                call = hop.rest_gateway_call(http, f"{process.url}/v1/tools/{hop.REST_TOOL}/invoke")
                target = hop.Target("rest", name, call, proxy=process.name, upstream=upstream.name)
                configs.append(Config(backend, workers, process, target, []))
        postmaster = Postmaster.of(cluster) if cluster is not None else None
        meter = hop.CpuMeter([upstream, *(c.process for c in configs), *([postmaster] if postmaster else [])])
        await measure(configs, meter, per_round, rounds, concurrency)
        for c in configs:
            if c.workers > 1:  # the parent only waits; the multiprocessing resource tracker is idle
                busy = (_proc_cpu(pid) or 0.0 for pid in _children(c.process.popen.pid))
                c.worker_cpu_s = sorted((round(x, 1) for x in busy if x >= 0.5), reverse=True)
    return [summarize(c, per_round * rounds) for c in configs]


def print_report(rows: Sequence[Row], ratio_rows: Sequence[dict[str, Any]], environment: dict[str, Any]) -> None:
    """The human-readable report."""
    print(f"{environment['cpus']} CPUs, Python {environment['python']}, {environment['concurrency']} calls in flight,"
          f" {environment['rounds']} rounds of {environment['per_round']} calls per configuration;"
          f" load average {environment['loadavg_before']} before, {environment['loadavg_after']} after")
    print("(client, upstream and gateway share these cores: see the CPU columns)")
    print()
    print(f"{'backend':<9} {'processes':>9} {'calls':>6} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"
          "   CPU ms/call: client / gateway / upstream / PostgreSQL")
    for r in rows:
        cpu = r.cpu_ms_per_call
        database = f"{cpu['postgres']:.2f}" if r.backend == "postgres" else "—"
        print(f"{r.backend:<9} {r.workers:>9} {r.calls:>6} {r.calls_per_s:>8,.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f}"
              f" {r.errors:>6}   {cpu['client']:.2f} / {cpu['gateway']:.2f} / {cpu['upstream']:.2f} / {database}")
    for r in rows:
        if r.worker_cpu_s:
            print(f"{r.backend} x{r.workers}: CPU seconds per worker {' / '.join(map(str, r.worker_cpu_s))}")
    print()
    for x in ratio_rows:
        print(f"{x['backend']}: {x['workers']} workers = {x['throughput_ratio']:.2f}x the calls/s of one process")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 2 when it could not measure (a server did not start, calls failed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls, for a smoke run")
    parser.add_argument("--backend", choices=("both", *BACKENDS), default="both", help="measure only one")
    parser.add_argument("--rounds", type=int, help="rounds over the configurations")
    parser.add_argument("--calls", type=int, help="calls per configuration per round")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help=f"calls in flight (default {CONCURRENCY})")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="write configs, logs and SQLite to DIR and keep them")
    args = parser.parse_args(argv)
    per_round, rounds = QUICK if args.quick else FULL
    per_round, rounds = args.calls or per_round, args.rounds or rounds
    concurrency = max(1, args.concurrency)
    backends = BACKENDS if args.backend == "both" else (args.backend,)

    exit_on_sigterm()
    raise_fd_limit()  # every configuration holds its connections open at once
    processes = Processes()
    started = time.perf_counter()
    environment: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                                   "concurrency": concurrency, "rounds": rounds, "per_round": per_round,
                                   "loadavg_before": loadavg()}
    try:
        with work_directory(args.keep, "bench-workers-") as directory, maybe_cluster("postgres" in backends) as cluster:
            try:
                rows = asyncio.run(run(directory, processes, cluster, backends, per_round, rounds, concurrency))
            finally:
                processes.stop_all()
    except Exception as exc:  # a server or the cluster did not start, a broken warm-up call
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 2
    errors = {f"{r.backend} x{r.workers}": (r.errors, r.first_errors) for r in rows if r.errors}
    if errors:
        print(f"error: calls failed: {errors}", file=sys.stderr)
    ratio_rows = ratios(rows)
    environment["seconds"] = round(time.perf_counter() - started, 1)
    environment["loadavg_after"] = loadavg()
    if args.json:
        print(json.dumps({"quick": args.quick, "environment": environment, "results": [asdict(r) for r in rows],
                          "ratios": ratio_rows}, indent=2))
    else:
        print_report(rows, ratio_rows, environment)
        print(f"\n({environment['seconds']:.0f} s)")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
