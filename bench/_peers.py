"""Peer MCP proxies for bench/gateway.py, each from PyPI in a bench-only virtualenv (never the project's).

    bench/.venv-peers/fastmcp     fastmcp (its proxy, reusing one connected upstream session)
    bench/.venv-peers/mcp-proxy   mcp-proxy (HTTP server mode in front of its stdio client mode)

The two cannot share one virtualenv: mcp-proxy pins the MCP SDK 1.x, fastmcp 4 needs 2.x. Both are
pinned here so that a figure names what it measured. ``ensure`` creates a missing virtualenv with
pip (a few seconds to a minute); nothing else here touches the network.

The FastMCP proxy itself is bench/_fastmcp_proxy.py, run by the fastmcp virtualenv's Python.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))
from _servers import BENCH_DIR, Process, Processes, free_port

PEERS_DIR = BENCH_DIR / ".venv-peers"
# peer → the PyPI requirement installed into its own virtualenv
PINS = {"fastmcp": "fastmcp==4.1.6", "mcp-proxy": "mcp-proxy==0.13.0",
        "py-spy": "py-spy==0.4.3"}  # not a peer: the sampling profiler of bench/gateway.py --sample
INSTALL_TIMEOUT_S = 600.0


def python_of(peer: str) -> Path:
    """The peer virtualenv's interpreter."""
    return PEERS_DIR / peer / "bin" / "python"


def ensure(peer: str) -> Path:
    """The peer's virtualenv, created and installed from PyPI when missing; its Python."""
    python = python_of(peer)
    marker = PEERS_DIR / peer / "installed.txt"
    if python.exists() and marker.exists() and marker.read_text().strip() == PINS[peer]:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEERS_DIR / peer)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", PINS[peer]], check=True, timeout=INSTALL_TIMEOUT_S)
    marker.write_text(PINS[peer] + "\n")
    return python


def start_fastmcp_proxy(processes: Processes, upstream_url: str, directory: Path, mode: str) -> Process:
    """A FastMCP proxy (streamable HTTP at /mcp) holding one connected upstream session in ``mode``."""
    port = free_port()
    argv = [str(ensure("fastmcp")), str(BENCH_DIR / "_fastmcp_proxy.py"), upstream_url, str(port), mode]
    return processes.spawn(f"fastmcp proxy {mode}", argv, directory / f"fastmcp-proxy-{mode}.log",
                           f"http://127.0.0.1:{port}")


def start_mcp_proxy(processes: Processes, upstream_url: str, directory: Path) -> Process:
    """mcp-proxy's HTTP server (at /mcp), whose default server is mcp-proxy's stdio client of the upstream.

    mcp-proxy bridges HTTP and stdio, so an HTTP-to-HTTP proxy is the two modes chained: two
    processes, whose CPU is counted together (``Process.cpu_seconds`` includes children).
    """
    port = free_port()
    binary = ensure("mcp-proxy").parent / "mcp-proxy"
    argv = [str(binary), "--port", str(port), "--host", "127.0.0.1", "--log-level", "WARNING", "--",
            str(binary), "--transport", "streamablehttp", upstream_url]
    return processes.spawn("mcp-proxy", argv, directory / "mcp-proxy.log", f"http://127.0.0.1:{port}",
                           health="/status")


SAMPLE_RATE = 500  # py-spy samples per second
SPY_ATTACH_S = 1.0  # py-spy reads the target's memory layout before its first sample
SPY_WRITE_TIMEOUT_S = 60.0


@contextlib.contextmanager
def sampled(pid: int, output: Path, rate: int = SAMPLE_RATE) -> Iterator[None]:
    """py-spy samples process ``pid`` while the block runs, without pausing it (``--nonblocking``), and
    writes the stacks it found on a CPU (idle ones are left out) to ``output``, one collapsed stack and its
    count a line (``--format raw``). Unlike cProfile it does not slow the Python code it measures, so the
    shares it gives are the process's own; bench/profile_packages.py sums them by package."""
    spy = subprocess.Popen([str(ensure("py-spy").parent / "py-spy"), "record", "--pid", str(pid), "--rate",
                            str(rate), "--format", "raw", "--full-filenames", "--nonblocking", "--output", str(output)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(SPY_ATTACH_S)
    if spy.poll() is not None:
        raise RuntimeError(f"py-spy could not sample process {pid}: {spy.stderr.read().decode(errors='replace')}"
                           if spy.stderr else f"py-spy exited with {spy.returncode}")
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
        spy.wait(SPY_WRITE_TIMEOUT_S)
