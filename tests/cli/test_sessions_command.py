"""`gateway sessions list|show|reset|end` against a real gateway on loopback: in this process (a worker thread,
while the gateway serves on the test's event loop), and once as a real process (the console entry)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest_asyncio
import yaml
from cli_run import run_cli_async as gateway_cli
from cli_run import run_subprocess_async
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.auth.keys import hash_key
from gateway.config.load import load_config

KEYS = {"agent": "agent-key-5b1e", "admin": "admin-key-c04d"}
POLICY = """
policy: p
rules:
  - id: two-calls
    when: session.calls >= 2
    action: terminate
    message: Two calls per run.
"""


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[str]:
    """A gateway with one HTTP tool (``svc_ping``), an agent key and an admin key; its base URL."""

    async def ping(request: Request) -> JSONResponse:
        return JSONResponse({"pong": True})

    upstream = Starlette(routes=[Route("/ping", ping, methods=["GET"])])
    async with serve_app(upstream, lifespan="off") as upstream_url:
        (tmp_path / "policies").mkdir()
        (tmp_path / "policies" / "p.yaml").write_text(POLICY, encoding="utf-8")
        config = {
            "policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"},
            "audit": {"file": "data/audit.jsonl"},
            "auth": {"api_keys": [{"principal": {"id": "agent"}, "sha256": hash_key(KEYS["agent"])},
                                  {"principal": {"id": "ops"}, "sha256": hash_key(KEYS["admin"]), "admin": True}]},
            "upstreams": [{"name": "svc", "http": {"base_url": upstream_url, "tools": [
                {"name": "ping", "method": "GET", "path": "/ping"}]}}],
        }
        (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        async with serve_app(build_app(load_config(tmp_path / "gateway.yaml"))) as url:
            yield url


async def _ping(url: str, run: str | None, user_agent: str = "agent-cli-test/1") -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEYS['agent']}", "User-Agent": user_agent,
               **({"X-Gateway-Session": run} if run else {})}
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        response = await client.post("/v1/tools/svc_ping/invoke", json={"arguments": {}})
    data: dict[str, Any] = response.json()
    return data


async def test_list_show_reset_and_end(served: str) -> None:
    admin = ["--url", served, "--key", KEYS["admin"]]
    assert [(await _ping(served, "run-1"))["decision"] for _ in range(3)] == ["allow", "allow", "terminate"]
    await _ping(served, None)

    listed = await run_subprocess_async("sessions", "list", *admin)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["PRINCIPAL", "RUN", "KIND", "STARTED", "CALLS", "REJECTED", "STATE"]
    by_run = {row.split()[1]: row for row in rows}
    assert by_run["run-1"].split()[2] == "named" and by_run["run-1"].endswith("terminated")
    [implicit] = [r for r in by_run if r.startswith("implicit-")]
    assert "implicit (agent-cli-test/1)" in by_run[implicit]

    only_named = json.loads((await gateway_cli("sessions", "list", "--implicit", "false", "--format", "json",
                                                *admin)).stdout)
    assert [s["id"] for s in only_named["sessions"]] == ["run-1"]

    shown = await gateway_cli("sessions", "show", "agent", "run-1", *admin)
    assert shown.returncode == 0, shown.stderr
    assert "Calls:     3  (rejected: 1)" in shown.stdout and "terminated: Two calls per run." in shown.stdout

    reset = await gateway_cli("sessions", "reset", "agent", "run-1", *admin)
    assert (reset.returncode, reset.stdout.strip()) == (0, "Reset run run-1 of agent: 0 calls, not terminated.")
    assert (await _ping(served, "run-1"))["decision"] == "allow"

    ended = await gateway_cli("sessions", "end", "agent", "run-1", "--message", "Paused by ops.", *admin)
    assert ended.returncode == 0, ended.stderr
    after = await _ping(served, "run-1")
    assert (after["decision"], after["content"][0]["text"]) == ("terminated", "Paused by ops.")


async def test_a_key_without_admin_and_an_unreachable_gateway(served: str, refused_url: str) -> None:
    refused = await gateway_cli("sessions", "list", "--url", served, "--key", KEYS["agent"])
    assert refused.returncode == 1
    assert "Only keys with admin: true may manage sessions. (HTTP 403 not-an-admin)" in refused.stderr
    missing = await gateway_cli("sessions", "show", "agent", "nope", "--url", served, "--key", KEYS["admin"])
    assert missing.returncode == 1 and "No such session." in missing.stderr
    down = await gateway_cli("sessions", "list", "--url", refused_url, "--key", KEYS["admin"])
    assert down.returncode == 2 and "cannot connect" in down.stderr
