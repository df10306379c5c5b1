"""`gateway status` against a real gateway (not ready, then ready), a hostile answer, and no gateway at all:
in this process, and once as a real process."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import yaml
from cli_run import run_cli_async, run_subprocess_async
from loopback import serve_app
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.config.load import load_config

FAST = {"retry_first": 0.05, "retry_max": 0.2, "check_interval": 0.1}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def gateway_status(*args: str) -> tuple[int, str, str]:
    """`gateway status ARGS` in this process (a worker thread: the gateway answers from this event loop)."""
    done = await run_cli_async("status", *args)
    return done.returncode, done.stdout, done.stderr


def write_config(root: Path, port: int) -> Path:
    (root / "policies").mkdir()
    (root / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    config = {"policies": ["policies"], "store": {"sqlite": "data/g.sqlite3"}, "audit": {"file": "data/audit.jsonl"},
              "supervision": FAST, "upstreams": [{"name": "svc", "http": {
                  "base_url": f"http://127.0.0.1:{port}", "tools": [{"name": "ping", "method": "GET", "path": "/"}]}}]}
    (root / "gateway.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return root / "gateway.yaml"


def json_app(body: Any, status: int = 200) -> Starlette:
    async def answer(request: object) -> JSONResponse:
        return JSONResponse(body, status_code=status)

    return Starlette(routes=[Route("/readyz", answer), Route("/", answer)])


async def test_status_says_not_ready_then_ready(tmp_path, until):
    port = free_port()
    config = load_config(write_config(tmp_path, port))
    async with serve_app(build_app(config)) as url:
        process = await run_subprocess_async("status", "--url", url)  # once through the console entry
        assert process.returncode == 1
        lines = process.stdout.splitlines()
        assert lines[0].startswith("NOT READY: policy revision ")
        assert lines[1].split()[:2] == ["down", "svc"]
        assert lines[1].endswith("1 tools  last error: not reachable")
        assert lines[2].split() == ["up", "store"]

        async with serve_app(json_app({}), port=port):
            async def ready() -> str | None:  # the supervisor retries the upstream within 0.2 s
                code, out, _ = await gateway_status("--url", url, "--format", "json")
                return out if code == 0 else None

            body = json.loads(await until(ready, timeout=60))
            assert body["status"] == "ready"
            assert [(u["name"], u["state"]) for u in body["upstreams"]] == [("svc", "up")]

            code, out, _ = await gateway_status("--url", url)
            assert (code, out.splitlines()[0].split(":")[0]) == (0, "ready")


async def test_status_prints_no_terminal_control_characters_from_the_answer():
    hostile = {"status": "ready", "revision": "r\x1b[2J", "upstreams": [
        {"name": "evil\x1b]0;owned\x07", "state": "up", "since": "now", "last_error": "x\r\x1b[31m", "tools": 1}]}
    async with serve_app(json_app(hostile)) as url:
        code, out, _ = await gateway_status("--url", url)
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "evil\\x1b]0;owned\\x07" in out  # shown as escapes, as every command that prints an answer does


async def test_status_names_each_identity_provider_and_why_its_tokens_are_refused():
    body = {"status": "not_ready", "revision": "r1", "upstreams": [], "store": {"state": "up", "last_error": None},
            "issuers": [{"issuer": "https://idp.example", "state": "down", "keys": 0,
                         "last_error": "keys older than jwks_max_age; last fetch: jwks: HTTP 503"}]}
    async with serve_app(json_app(body, 503)) as url:
        code, out, _ = await gateway_status("--url", url)
    assert code == 1
    assert out.splitlines()[-1].split() == ["down", "issuer", "https://idp.example", "0", "keys", "last", "error:",
                                            "keys", "older", "than", "jwks_max_age;", "last", "fetch:", "jwks:",
                                            "HTTP", "503"]


async def test_status_without_a_gateway_exits_2(tmp_path):
    code, out, err = await gateway_status("--url", f"http://127.0.0.1:{free_port()}")
    assert (code, out) == (2, "")
    assert err.startswith("gateway status: cannot read http://127.0.0.1:")
    async with serve_app(json_app({"not": "readiness"}, 404)) as url:  # something else answers there
        code, _, err = await gateway_status("--url", url)
    assert code == 2 and "not a readiness answer" in err
