"""`gateway serve --workers N` on SQLite, and a store that refuses to start."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import yaml
from loopback import serve_app
from test_multiprocess import KEYS, Gateway, Upstream, _tools

from gateway.auth import hash_key

POLICY = "policy: plain\nrules:\n  - id: all\n    tools: ['*']\n    action: allow\n"


def _config(tmp_path: Path, upstream_url: str) -> Path:
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "plain.yaml").write_text(POLICY)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({
        "policies": ["policies"], "store": {"sqlite": "data/g.sqlite3"}, "audit": {"file": "audit.jsonl"},
        "auth": {"api_keys": [
            {"principal": {"id": "alice", "groups": []}, "sha256": hash_key(KEYS["alice"])},
            {"principal": {"id": "dave", "groups": []}, "sha256": hash_key(KEYS["dave"]), "approver": True,
             "admin": True}]},
        "upstreams": [{"name": "up", "http": {"base_url": upstream_url, "tools": _tools()}}]}))
    return path


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


def test_a_database_from_a_newer_gateway_is_refused_at_start(tmp_path: Path) -> None:
    config = _config(tmp_path, "http://127.0.0.1:9")
    (tmp_path / "data").mkdir()
    db = sqlite3.connect(tmp_path / "data" / "g.sqlite3")
    db.execute("CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    db.execute("INSERT INTO schema_versions VALUES ('sessions', 7)")
    db.commit()
    db.close()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", str(config), "--port", "0"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1
    assert "the sessions schema in" in done.stderr and "version 7, newer than this gateway knows (1)" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def _serve_with_store(tmp_path: Path, store: dict[str, object],
                      env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = _config(tmp_path, "http://127.0.0.1:9")
    data = yaml.safe_load(config.read_text())
    data["store"] = store
    config.write_text(yaml.safe_dump(data))
    clean = {k: v for k, v in os.environ.items() if k != "GATEWAY_MISSING_DSN"}
    return subprocess.run([sys.executable, "-m", "gateway", "serve", str(config), "--port", "0"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**clean, **env})


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
