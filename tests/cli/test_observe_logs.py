"""`gateway serve --log-format json` (or `logging: {format: json}`): every line the gateway logs is a JSON object."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from pathlib import Path

import httpx2
import pytest
import yaml

from gateway.auth import hash_key

KEY = "json-logs-key-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _write(root: Path, **extra: object) -> Path:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    config = {"policies": ["policies"], "store": {"sqlite": "data/g.sqlite3"}, "audit": {"file": "data/a.jsonl"},
              "auth": {"api_keys": [{"principal": {"id": "alice"}, "sha256": hash_key(KEY)}]}, **extra}
    path = root / "gateway.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def _serve_and_read_stderr(config: Path, *args: str) -> list[str]:
    """Run `gateway serve`, make a few requests (one a 404 for a tool that does not exist), stop it: its stderr."""
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", str(config), "--port", str(port), "--log-level", "info", *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(300):
                if process.returncode is not None:
                    break
                with contextlib.suppress(httpx2.TransportError):
                    if (await client.get("/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            missing = await client.post("/v1/tools/nothing/invoke", json={"arguments": {}},
                                        headers={"Authorization": f"Bearer {KEY}"})
            assert missing.status_code == 404
    finally:
        if process.returncode is None:
            process.terminate()
        assert process.stderr is not None
        err = await asyncio.wait_for(process.stderr.read(), 30)
        await asyncio.wait_for(process.wait(), 30)
    return err.decode().splitlines()


@pytest.mark.parametrize("how", ["flag", "config"])
async def test_every_log_line_is_a_json_object(tmp_path, how):
    if how == "flag":
        lines = await _serve_and_read_stderr(_write(tmp_path), "--log-format", "json")
    else:
        lines = await _serve_and_read_stderr(_write(tmp_path, logging={"format": "json"}))
    assert len(lines) >= 3, lines  # the start, uvicorn's lines, the access log
    records = [json.loads(line) for line in lines]  # fails on any line that is not JSON
    for record in records:
        assert isinstance(record, dict) and {"time", "level", "logger", "message"} <= set(record), record
        assert record["time"].endswith("Z")
    messages = " | ".join(r["message"] for r in records)
    assert "listening on http://127.0.0.1:" in messages
    assert any(r["logger"] == "uvicorn.access" and "/v1/tools/nothing/invoke" in r["message"] for r in records)


async def test_text_logs_stay_the_default(tmp_path):
    lines = await _serve_and_read_stderr(_write(tmp_path))
    assert any(line.startswith("gateway: listening on") for line in lines)
    assert not any(line.startswith("{") for line in lines)
