"""`gateway serve --workers N` on SQLite (a killed worker is started again, a crash loop ends the gateway), and a
store that refuses to start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import yaml
from cli_run import run_cli
from loopback import serve_app
from test_multiprocess import KEYS, Gateway, Upstream, _tools

from gateway.auth.keys import hash_key
from gateway.core.limits import WORKER_CRASH_LOOP_LIMIT

POLICY = "policy: plain\nrules:\n  - id: all\n    tools: ['*']\n    action: allow\n"


def _config(tmp_path: Path, upstream_url: str) -> Path:
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "plain.yaml").write_text(POLICY)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({
        "policies": ["policies"], "store": {"sqlite": "data/g.sqlite3"},
        "audit": {"file": "audit.jsonl", "rotate": {"max_bytes": 65_536}},
        "auth": {"api_keys": [
            {"principal": {"id": "alice", "groups": []}, "sha256": hash_key(KEYS["alice"])},
            {"principal": {"id": "dave", "groups": []}, "sha256": hash_key(KEYS["dave"]), "approver": True,
             "admin": True}]},
        "upstreams": [{"name": "up", "http": {"base_url": upstream_url, "tools": _tools()}}]}))
    return path


@pytest.mark.slow  # a parent and two worker processes: >10 s on a loaded 2-core machine
async def test_two_workers_on_one_sqlite_file_count_every_call_once(tmp_path: Path) -> None:
    counting = Upstream()
    async with serve_app(counting.app()) as url:
        gateway = Gateway(_config(tmp_path, url), "workers")
        with gateway.log.open("ab") as log:
            gateway.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", str(gateway.config), "--port", str(gateway.port),
                 "--workers", "2", "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=log, cwd=tmp_path)
        try:
            await gateway.ready()
            async with gateway.client("alice") as alice:
                # many connections at once, so both workers take some
                clients = [httpx2.AsyncClient(base_url=gateway.url, headers=alice.headers) for _ in range(8)]
                try:
                    await asyncio.gather(*(clients[n % 8].post(
                        "/v1/tools/up_ping/invoke", json={"arguments": {}, "session_id": "shared"})
                        for n in range(60)))
                finally:
                    for client in clients:
                        await client.aclose()
            async with gateway.client("dave") as admin:
                session = (await admin.get("/v1/admin/sessions/alice/shared")).json()
        finally:
            gateway.stop()
        assert gateway.proc.returncode == 0, gateway.log.read_text()
    assert session["calls"] == 60
    assert counting.runs["ping"] == 60
    assert "2 workers listening" in gateway.log.read_text()
    # each worker its own audit file and chain; together they hold every call, and each chain verifies
    files = sorted(tmp_path.glob("audit*.jsonl*"))
    assert [f.name for f in files if not f.name[-1].isdigit()] == ["audit.worker-0.jsonl", "audit.worker-1.jsonl"]
    verified = run_cli(tmp_path, "audit", "verify", *map(str, files), "--format", "json")
    report = json.loads(verified.stdout)
    assert (verified.returncode, report["ok"], len(report["chains"])) == (0, True, 2), verified.stdout
    outcomes = [e for f in files for e in map(json.loads, f.read_text().splitlines()) if e["event"] == "call.outcome"]
    assert len([e for e in outcomes if e["tool"] == "up_ping"]) == 60


def _serve_workers(gateway: Gateway, workers: int = 2) -> None:
    """`gateway serve --workers N` at info level: the parent logs each worker's pid as it starts one."""
    with gateway.log.open("ab") as log:
        gateway.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", str(gateway.config), "--port", str(gateway.port),
             "--workers", str(workers), "--log-level", "info"], stdout=subprocess.DEVNULL, stderr=log,
            cwd=gateway.config.parent)


def _started(gateway: Gateway) -> list[int]:
    """The pids of the workers the parent started so far, in order (first starts, then restarts)."""
    text = gateway.log.read_text()
    return [int(p) for p in re.findall(r"worker gateway-worker-\d started \(pid (\d+)\)"
                                       r"|started it again \(pid (\d+)\)", text) for p in p if p]


_SEEN: set[int] = set()  # every worker pid a test saw, so none outlives it


def _workers(gateway: Gateway) -> set[int]:
    """The parent's worker processes alive now (its children that run multiprocessing's spawn_main)."""
    assert gateway.proc is not None
    found = set()
    with contextlib.suppress(FileNotFoundError):  # the parent has gone
        for task in Path(f"/proc/{gateway.proc.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                with contextlib.suppress(FileNotFoundError):
                    if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.add(int(pid))
    _SEEN.update(found)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(gateway: Gateway) -> None:
    """Stop the gateway; then kill any worker it left behind (the test fails on its own if that mattered)."""
    gateway.stop()
    for pid in {*_SEEN, *_started(gateway)}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _SEEN.clear()


def _serving(gateway: Gateway, pid: int) -> bool:
    """Whether this worker's app has started serving (it logged so, under its pid)."""
    return f"[{pid}]: serving" in gateway.log.read_text()


async def _until(check, what: str, gateway: Gateway, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}\n{gateway.log.read_text()}"
        await asyncio.sleep(0.1)


@pytest.mark.slow  # a parent and three worker processes, one after a kill: >10 s on a loaded 2-core machine
async def test_a_killed_worker_is_started_again_while_the_others_keep_answering(tmp_path: Path) -> None:
    counting = Upstream()
    async with serve_app(counting.app()) as url:
        gateway = Gateway(_config(tmp_path, url), "restart")
        _serve_workers(gateway)
        try:
            await gateway.ready()
            await _until(lambda: len(_workers(gateway)) == 2, "two workers started", gateway)
            first = _workers(gateway)
            victim = min(first)
            os.kill(victim, signal.SIGKILL)  # hostile: the OOM killer, or an operator's kill -9
            answered = 0

            def replaced() -> int | None:
                new = _workers(gateway) - first
                return next((pid for pid in new if _serving(gateway, pid)), None)

            # a fresh connection per call, so the kernel hands each to a live worker
            async with httpx2.AsyncClient(base_url=gateway.url, limits=httpx2.Limits(max_keepalive_connections=0),
                                          headers={"Authorization": f"Bearer {KEYS['alice']}"}) as alice:
                deadline = time.monotonic() + 90
                while (fresh := replaced()) is None:
                    assert time.monotonic() < deadline, gateway.log.read_text()
                    assert gateway.proc is not None and gateway.proc.poll() is None, gateway.log.read_text()
                    response = await alice.post("/v1/tools/up_ping/invoke", json={"arguments": {}})
                    assert response.status_code == 200, response.text
                    answered += 1
                    await asyncio.sleep(0.05)
                after = await alice.post("/v1/tools/up_ping/invoke", json={"arguments": {}})
            assert after.status_code == 200
            assert gateway.proc.poll() is None  # the gateway never stopped
            assert _workers(gateway) == {*(first - {victim}), fresh}
            log = gateway.log.read_text()
            assert f"(pid {victim}) was killed by SIGKILL" in log and f"started it again (pid {fresh})" in log
        finally:
            _stop(gateway)
        assert gateway.proc.returncode == 0, gateway.log.read_text()
    assert counting.runs["ping"] == answered + 1


@pytest.mark.slow  # workers started again and again until the crash-loop limit: >10 s on a loaded 2-core machine
async def test_a_worker_that_dies_at_once_again_and_again_stops_the_gateway_with_the_reason(tmp_path: Path) -> None:
    async with serve_app(Upstream().app()) as url:
        gateway = Gateway(_config(tmp_path, url), "crash-loop")
        _serve_workers(gateway)
        try:
            await gateway.ready()
            await _until(lambda: len(_workers(gateway)) == 2, "two workers started", gateway)
            # hostile: the config is broken on disk after the start, then a worker dies; each new one dies at once
            gateway.config.write_text(gateway.config.read_text().replace("upstreams:", "upstreams: [\n"))
            os.kill(min(_workers(gateway)), signal.SIGKILL)
            assert gateway.proc is not None
            await _until(lambda: gateway.proc.poll() is not None, "the gateway stopped", gateway, seconds=240)
            # it stopped the worker that still served, too
            assert not [pid for pid in {*_SEEN, *_started(gateway)} if _alive(pid)]
        finally:
            _stop(gateway)
    log = gateway.log.read_text()
    assert gateway.proc.returncode == 1, log
    assert f"of starting {WORKER_CRASH_LOOP_LIMIT} times in a row" in log and "stopping the gateway" in log, log
    assert "exited with status 1" in log
    assert "error[" in log and "Traceback" not in log, log  # each worker said why, as `gateway serve` would
    # at least the limit's restarts (the killed worker counts too when it had lived less than the quick-death
    # time; on a loaded machine a restarted one may take longer than that to die, and then the count starts
    # again), and none after the gateway decided to stop
    assert len(_started(gateway)) >= 2 + WORKER_CRASH_LOOP_LIMIT - 1, log
    after_stop = log[log.index("stopping the gateway"):]
    assert not re.search(r"started it again \(pid \d+\)", after_stop), after_stop


def test_a_database_from_a_newer_gateway_is_refused_at_start(tmp_path: Path) -> None:
    config = _config(tmp_path, "http://127.0.0.1:9")
    (tmp_path / "data").mkdir()
    db = sqlite3.connect(tmp_path / "data" / "g.sqlite3")
    db.execute("CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    db.execute("INSERT INTO schema_versions VALUES ('sessions', 7)")
    db.commit()
    db.close()
    done = run_cli(tmp_path, "serve", str(config), "--port", "0")  # refused before it serves, or it would hang
    assert done.returncode == 1
    assert "the sessions schema in" in done.stderr and "version 7, newer than this gateway knows (2)" in done.stderr
    assert "Traceback" not in done.stderr


def _serve_with_store(tmp_path: Path, store: dict[str, object],
                      env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`gateway serve` with this store, in this process (it must refuse before it serves)."""
    config = _config(tmp_path, "http://127.0.0.1:9")
    data = yaml.safe_load(config.read_text())
    data["store"] = store
    config.write_text(yaml.safe_dump(data))
    return run_cli(tmp_path, "serve", str(config), "--port", "0", env={"GATEWAY_MISSING_DSN": None, **env})


def test_a_missing_dsn_variable_is_a_config_error(tmp_path: Path) -> None:
    done = _serve_with_store(tmp_path, {"postgres": {"dsn": {"env": "GATEWAY_MISSING_DSN"}}}, {})
    assert done.returncode == 1
    assert "error[secret-missing]" in done.stderr and "env: GATEWAY_MISSING_DSN" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_postgres_refuses_to_start_without_showing_the_password(tmp_path: Path) -> None:
    done = _serve_with_store(tmp_path, {"postgres": {"dsn": {"env": "GATEWAY_DSN"}}},
                             {"GATEWAY_DSN": "postgresql://gw:hunter2-secret@127.0.0.1:1/gw"})
    assert done.returncode == 1
    assert "cannot connect to postgresql://127.0.0.1:1/gw" in done.stderr
    assert "hunter2" not in done.stderr and "Traceback" not in done.stderr
