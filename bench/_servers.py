"""Loopback servers for the end-to-end benchmarks: trivial upstreams and the gateway itself.

Each runs in its own subprocess so that it does not share the benchmark client's event loop (or
its CPU: the machine these were written on has two cores). Everything binds 127.0.0.1.

    python bench/_servers.py mcp PORT [DELAY_MS]   MCP over streamable HTTP at /mcp with one tool, `echo`
                                                   (answering DELAY_MS later, if given)
    python bench/_servers.py http PORT             Starlette: POST /echo, POST /execute, GET /counts
    python bench/_servers.py forward PORT TO_PORT  every TCP connection to PORT piped byte for byte to TO_PORT
    python bench/_servers.py issuer PORT JWKS_FILE GET /jwks: the JSON of JWKS_FILE (a made-up IdP, bench/_idp.py)

``/execute`` counts its runs per ``request`` argument and ``/counts`` reports them, so a test can
check, without going through the gateway, how often each call really ran upstream.

Used by bench/gateway.py, bench/approvals.py and bench/client_cost.py (see bench/README.md); not meant to be
run alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

STARTUP_TIMEOUT_S = 90.0  # a subprocess must answer /healthz within this (generous: busy machines, cProfile)
STOP_TIMEOUT_S = 5.0  # after SIGTERM, this long before SIGKILL
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# ---------------------------------------------------------------------------------------------
# Small shared pieces


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_fd_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to the hard limit (children inherit it); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted samples."""
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


def filesystem_of(path: Path) -> str:
    """The filesystem type ``path`` lives on (SQLite and audit costs depend on it), from /proc/mounts."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    resolved = str(path.resolve())
    best = max((m for m in mounts if resolved == m[0] or resolved.startswith(m[0].rstrip("/") + "/")),
               key=lambda m: len(m[0]), default=None)
    return best[1] if best else "unknown"


def loadavg() -> str:
    """The 1/5/15-minute load average: other work on the machine skews every figure measured here."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def describe(exc: BaseException) -> str:
    """The first real error inside the SDK's nested exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def work_directory(keep: Path | None, prefix: str) -> Iterator[Path]:
    """Where the config, logs, audit file and SQLite go: ``keep`` (created, left behind) or a temp dir."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def new_api_key() -> tuple[str, str]:
    """A fresh random API key and the SHA-256 hex the gateway config stores for it."""
    key = secrets.token_urlsafe(24)
    return key, hashlib.sha256(key.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Subprocesses


@dataclass
class Process:
    """A server subprocess we started, its log, and what it cost."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str

    def cpu_seconds(self) -> float | None:
        """User + system CPU the process and its live children have used so far (Linux /proc), or None."""
        own = _proc_cpu(self.popen.pid)
        if own is None:
            return None
        return own + sum(_proc_cpu(pid) or 0.0 for pid in _children(self.popen.pid))

    def rss_mb(self) -> float | None:
        """Resident memory in MiB (Linux /proc), or None."""
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the process's output, for error messages."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGINT, then SIGKILL if it lingers; only this process, by its id.

        SIGINT rather than SIGTERM: uvicorn shuts down gracefully on either but then re-raises the
        signal, and only SIGINT (as KeyboardInterrupt) still lets cProfile write its stats.
        """
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(STOP_TIMEOUT_S)


def _proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (a proxy that runs its upstream leg in a child: mcp-proxy)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


@dataclass
class Processes:
    """Every subprocess a benchmark started, stopped together (newest first) in a ``finally``."""

    started: list[Process] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str], log: Path, url: str, health: str = "/healthz") -> Process:
        """Start ``argv`` with output to ``log``, then wait until ``url`` + ``health`` answers 200."""
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=REPO_ROOT)
        process = Process(name, popen, log, url)
        self.started.append(process)
        wait_healthy(process, health=health)
        return process

    def stop_all(self) -> None:
        """Stop every process, newest first."""
        while self.started:
            self.started.pop().stop()


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the ``finally`` that stops the subprocesses runs."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def wait_healthy(process: Process, timeout: float = STARTUP_TIMEOUT_S, health: str = "/healthz") -> None:
    """Poll ``health`` until it answers 200; raise with the process's output if it dies or never does."""
    deadline = time.monotonic() + timeout
    with httpx2.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited with {process.popen.returncode}:\n{process.log_tail()}")
            with contextlib.suppress(httpx2.HTTPError):
                if client.get(f"{process.url}{health}").status_code == 200:
                    return
            time.sleep(0.05)
    raise RuntimeError(f"{process.name} did not answer {process.url}{health} in {timeout:.0f}s:\n"
                       f"{process.log_tail()}")


def start_upstream(processes: Processes, kind: str, directory: Path, delay_ms: float = 0.0) -> Process:
    """Start this file's ``mcp`` or ``http`` server on a free port (``mcp``: answering ``delay_ms`` later)."""
    port = free_port()
    later = [str(delay_ms)] if delay_ms else []
    name = f"{kind} upstream" + (f" +{delay_ms:g} ms" if delay_ms else "")
    return processes.spawn(name, [sys.executable, str(Path(__file__).resolve()), kind, str(port), *later],
                           directory / f"upstream-{kind}-{port}.log", f"http://127.0.0.1:{port}")


def start_forwarder(processes: Processes, target: Process, directory: Path) -> Process:
    """A byte-for-byte TCP forwarder on a free port in front of ``target`` (adds a hop, changes nothing sent)."""
    port = free_port()
    to_port = target.url.rsplit(":", 1)[1]
    return processes.spawn("forwarder", [sys.executable, str(Path(__file__).resolve()), "forward", str(port), to_port],
                           directory / f"forwarder-{port}.log", f"http://127.0.0.1:{port}")


def start_gateway(processes: Processes, config: Path, log_level: str = "warning",
                  profile: Path | None = None, name: str = "gateway") -> Process:
    """``gateway serve CONFIG`` on the config's port; ``warning`` keeps uvicorn's access log out of the timings.

    With ``profile``, the gateway runs under cProfile and writes its stats there when stopped.
    """
    port = yaml.safe_load(config.read_text())["listen"]["port"]
    run = ["-c", _PROFILED_GATEWAY, str(profile.resolve())] if profile else ["-m", "gateway"]
    argv = [sys.executable, *run, "serve", str(config), "--log-level", log_level]
    return processes.spawn(name, argv, config.parent / "gateway.log", f"http://127.0.0.1:{port}")


# `python -m gateway` under cProfile timed by CPU, not wall clock: on a busy machine the wall
# clock charges a function for the time the process waited for a core (a loopback send() that
# wakes the receiver often looks like milliseconds), which hides where the CPU actually goes.
_PROFILED_GATEWAY = """
import cProfile, runpy, sys, time
out = sys.argv.pop(1)
sys.argv[0] = "gateway"
profiler = cProfile.Profile(time.process_time)
try:
    profiler.runcall(runpy.run_module, "gateway", run_name="__main__", alter_sys=True)
except (SystemExit, KeyboardInterrupt):
    pass
finally:
    profiler.dump_stats(out)
"""


def start_issuer(processes: Processes, jwks: dict[str, Any], directory: Path) -> Process:
    """A made-up identity provider's JWKS at ``{url}/jwks`` (``jwks`` written to a file it serves)."""
    port = free_port()
    path = directory / f"jwks-{port}.json"
    path.write_text(json.dumps(jwks))
    return processes.spawn("issuer", [sys.executable, str(Path(__file__).resolve()), "issuer", str(port), str(path)],
                           directory / f"issuer-{port}.log", f"http://127.0.0.1:{port}")


def write_gateway_config(directory: Path, *, upstreams: list[dict[str, Any]], policy: dict[str, Any],
                         api_keys: list[dict[str, Any]], env: dict[str, Any] | None = None,
                         extra: dict[str, Any] | None = None, jwt: list[dict[str, Any]] | None = None) -> Path:
    """A gateway.yaml in ``directory`` (free port, sqlite + audit beside it, then ``extra``'s sections) and its
    one policy file; ``jwt``: the ``auth.jwt`` issuers beside the API keys."""
    policies = directory / "policies"
    policies.mkdir(exist_ok=True)
    (policies / f"{policy['policy']}.yaml").write_text(yaml.safe_dump(policy, sort_keys=False, width=200))
    config = {
        "listen": {"host": "127.0.0.1", "port": free_port()},
        "policies": ["policies"],
        "env": env or {},
        "store": {"sqlite": str(directory / "gateway.sqlite3")},
        "audit": {"file": str(directory / "audit.jsonl")},
        "auth": {"api_keys": api_keys, **({"jwt": jwt} if jwt else {})},
        "upstreams": upstreams,
        **(extra or {}),
    }
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, width=200))
    return path


# ---------------------------------------------------------------------------------------------
# The upstream servers (run in the subprocess; imports kept local so the parent stays light)


def _mcp_app(delay_ms: float = 0.0) -> Any:
    import mcp_types as types
    from mcp.server import Server, ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    echo = types.Tool(name="echo", description="Return the text unchanged.",
                      input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                    "required": ["text"]},
                      annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False))

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[echo])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        text = str((params.arguments or {}).get("text", ""))
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("bench-upstream", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    sessions = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(sessions)),
                             Route("/healthz", healthz)], lifespan=lifespan)


def _http_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    counts: dict[str, int] = {}

    async def echo(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"text": body.get("text", "")})

    async def execute(request: Request) -> JSONResponse:
        body = await request.json()
        key = str(body.get("request"))
        counts[key] = counts.get(key, 0) + 1
        return JSONResponse({"request": key, "amount": body.get("amount"), "execution": counts[key]})

    async def read_counts(request: Request) -> JSONResponse:
        return JSONResponse({"counts": counts, "total": sum(counts.values())})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/echo", echo, methods=["POST"]), Route("/execute", execute, methods=["POST"]),
                             Route("/counts", read_counts), Route("/healthz", healthz)])


def _issuer_app(jwks_file: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    body = Path(jwks_file).read_bytes()

    async def keys(request: Request) -> Response:
        return Response(body, media_type="application/json")

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/jwks", keys), Route("/healthz", healthz)])


def _serve(kind: str, port: int, delay_ms: float, jwks_file: str = "") -> None:
    import uvicorn

    app = _issuer_app(jwks_file) if kind == "issuer" else _mcp_app(delay_ms) if kind == "mcp" else _http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096)


def _forward(port: int, to_port: int) -> None:
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        to_reader, to_writer = await asyncio.open_connection("127.0.0.1", to_port)
        await asyncio.gather(pipe(reader, to_writer), pipe(to_reader, writer))

    async def serve() -> None:
        async with await asyncio.start_server(connected, "127.0.0.1", port) as server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "forward":
        _forward(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "issuer":
        _serve("issuer", int(sys.argv[2]), 0.0, sys.argv[3])
    elif len(sys.argv) in (3, 4) and sys.argv[1] in ("mcp", "http"):
        _serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) == 4 else 0.0)
    else:
        sys.exit("usage: python bench/_servers.py mcp PORT [DELAY_MS] | http PORT | forward PORT TO_PORT"
                 " | issuer PORT JWKS_FILE")
