"""`gateway serve --log-format json` (or `logging: {format: json}`): every line the gateway logs is a JSON object."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from gateway.auth.keys import hash_key

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


@pytest.mark.slow  # a real `gateway serve` subprocess per test: >10 s on a loaded 2-core machine
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


@pytest.mark.slow  # a real `gateway serve` subprocess per test: >10 s on a loaded 2-core machine
async def test_text_logs_stay_the_default(tmp_path):
    lines = await _serve_and_read_stderr(_write(tmp_path))
    assert any(line.startswith("gateway: listening on") for line in lines)
    assert not any(line.startswith("{") for line in lines)


# --- no argument value in the log (issue 18, item 17) ----------------------------------------------

MARKER = "SSN-778-41-9920"  # an argument value: in an upstream URL's path and query, an MCP argument
UPSTREAM_MCP_SERVER = Path(__file__).resolve().parents[1] / "upstream_mcp_server.py"


def _item_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def item(request: Request) -> JSONResponse:
        return JSONResponse({"id": request.path_params["item_id"], "query": dict(request.query_params)})

    return Starlette(routes=[Route("/items/{item_id}", item)])


@pytest.mark.slow  # a real `gateway serve` subprocess per test: >10 s on a loaded 2-core machine
@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_no_argument_value_reaches_the_log_at_debug(tmp_path, log_format):
    from loopback import serve_app
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tool = {"name": "get_item", "method": "GET", "path": "/items/{item_id}", "query": ["q"],
            "input_schema": {"type": "object", "properties": {"item_id": {"type": "string"}, "q": {"type": "string"}}}}
    async with serve_app(_item_app()) as api_url:
        config = _write(tmp_path, upstreams=[
            {"name": "api", "http": {"base_url": api_url, "tools": [tool]}},
            {"name": "up", "mcp": {"command": sys.executable, "args": [str(UPSTREAM_MCP_SERVER)]}}])
        port = _free_port()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", str(config), "--port", str(port), "--log-level", "debug",
            "--log-format", log_format, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {KEY}"}
        try:
            async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
                for _ in range(600):  # the stdio upstream imports the MCP SDK: seconds on a busy machine
                    assert process.returncode is None, "the gateway exited"
                    with contextlib.suppress(httpx2.TransportError):
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
                answer = await client.post(f"/v1/tools/api_get_item/invoke?note={MARKER}",
                                           json={"arguments": {"item_id": MARKER, "q": f"{MARKER}-q"}})
                assert MARKER in answer.text  # the call went through, with the value in the upstream's URL
                async with Client(streamable_http_client(f"{base}/mcp", http_client=client), mode="legacy") as mcp:
                    result = await mcp.call_tool("up_echo", {"text": f"{MARKER}-mcp"})
                    assert f"{MARKER}-mcp" in str(result.content)
                    read = await mcp.read_resource(f"gateway://up/notes://users/{MARKER}-uri")  # a variable
                    assert f"{MARKER}-uri" in str(read.contents)
        finally:
            if process.returncode is None:
                process.terminate()
            assert process.stdout is not None and process.stderr is not None
            out, err = await asyncio.wait_for(asyncio.gather(process.stdout.read(), process.stderr.read()), 30)
            await asyncio.wait_for(process.wait(), 30)
    lines = (out + err).decode().splitlines()
    leaked = [line for line in lines if MARKER in line]
    assert leaked == []
    # the log was on and saw the calls: the access log has them, the query cut off
    assert any("/v1/tools/api_get_item/invoke?…" in line for line in lines), lines[-20:]
