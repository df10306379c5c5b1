"""`gateway check --config gateway.yaml --probe`: every upstream started once, its tools listed, or why it can't be."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from cli_run import run_cli, run_subprocess

TESTS = Path(__file__).parent.parent
PID_SERVICE = TESTS / "upstreams" / "pid_service.py"
MCP_SERVER = TESTS / "upstream_mcp_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def check_probe(root: Path, upstreams: list[dict[str, Any]], *args: str,
                process: bool = False) -> subprocess.CompletedProcess[str]:
    """`gateway check --config gateway.yaml --probe ARGS` in ``root``: in this process, or as a real process."""
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    config = {"policies": ["policies"], "upstreams": upstreams}
    (root / "gateway.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    run = run_subprocess if process else run_cli
    return run(root, "check", "--config", str(root / "gateway.yaml"), "--probe", *args)


def pid_tool(port: int) -> dict[str, Any]:
    return {"base_url": f"http://127.0.0.1:{port}", "tools": [{"name": "pid", "method": "GET", "path": "/pid"}]}


def test_probe_lists_the_tools_of_reachable_upstreams_and_says_why_others_cannot_be_reached(tmp_path):
    launched, closed, gone = free_port(), free_port(), free_port()
    result = check_probe(tmp_path, [
        {"name": "stdio", "mcp": {"command": sys.executable, "args": [str(MCP_SERVER)]}},
        {"name": "svc", "http": {**pid_tool(launched), "launch": {
            "command": sys.executable, "args": [str(PID_SERVICE), str(launched), str(tmp_path / "launches")]}}},
        {"name": "closed", "http": pid_tool(closed)},
        {"name": "remote", "mcp": {"url": f"http://127.0.0.1:{gone}/mcp"}},
        {"name": "crashes", "http": {**pid_tool(free_port()), "launch": {
            "command": sys.executable, "args": ["-c", "import sys; sys.exit(4)"]}}},
    ])
    assert result.returncode == 1
    out = result.stdout.splitlines()
    assert any(line.startswith("ok: 1 policies") for line in out), out  # the check itself passed first
    stdio = next(line for line in out if line.startswith("probe: stdio: up, "))
    assert "stdio_echo" in stdio and "stdio_add" in stdio
    assert "probe: svc: up, 1 tools: svc_pid" in out
    err = result.stderr.splitlines()
    assert f"probe: closed: DOWN: closed: nothing answers on 127.0.0.1:{closed}" in err
    assert any(line.startswith("probe: remote: DOWN: remote: cannot connect: ") for line in err), err
    assert "probe: crashes: DOWN: crashes: the launched process exited with 4" in err
    assert (tmp_path / "launches").read_text().count("\n") == 1  # launched once, for the probe...
    assert not listening(launched)  # ...and stopped again


def test_probe_exits_0_when_every_upstream_answers_and_speaks_json(tmp_path):
    port = free_port()
    launch = {"command": sys.executable, "args": [str(PID_SERVICE), str(port), str(tmp_path / "launches")]}
    result = check_probe(tmp_path, [{"name": "svc", "http": {**pid_tool(port), "launch": launch}}], "--format", "json",
                         process=True)  # the one run through the console entry
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # one document: the check's, with the probe's findings
    assert report["ok"] is True
    assert report["upstreams"] == [{"name": "svc", "tools": ["svc_pid"], "error": None}]


def test_probe_needs_a_config(tmp_path):
    result = run_cli(tmp_path, "check", "--probe", str(tmp_path))
    assert (result.returncode, result.stderr.strip()) == (2, "gateway check: --probe needs --config")
