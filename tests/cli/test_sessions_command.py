"""`gateway sessions list|show|reset|end` against a real gateway on loopback: in this process (a worker thread,
while the gateway serves on the test's event loop), and once as a real process (the console entry)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
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
from gateway.policy.flow import TallyChange, history_entry

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
async def served_app(tmp_path: Path) -> AsyncIterator[tuple[str, Starlette]]:
    """A gateway with one HTTP tool (``svc_ping``), an agent key and an admin key; its base URL and app."""

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
        app = build_app(load_config(tmp_path / "gateway.yaml"))
        async with serve_app(app) as url:
            yield url, app


@pytest.fixture
def served(served_app: tuple[str, Starlette]) -> str:
    """The base URL of ``served_app``."""
    return served_app[0]


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
    assert (reset.returncode, reset.stdout.strip()) == (
        0, "Reset run run-1 of agent: 0 calls, no labels, tallies or history, not terminated.")
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


async def test_show_gives_the_runs_labels_tallies_and_latest_calls(served_app: tuple[str, Starlette]) -> None:
    url, app = served_app
    admin = ["--url", url, "--key", KEYS["admin"]]
    assert (await _ping(url, "run-9"))["decision"] == "allow"
    store = app.state.gateway.store
    state = await store.find_session("agent", "run-9")
    # What the pipeline adds when a policy labels and tallies (another part of issue 21), through the store.
    store.add_labels(state, ["untrusted", "secret"])
    await store.admit(state, lambda view: (None, TallyChange(sums={"transferred": 700.0},
                                                             distinct={"recipients": ("a@example.test",)})))
    store.add_history(state, history_entry("mail_read", "allow", "web-is-untrusted", ["untrusted"],
                                           "2026-12-02T16:20:00Z"))
    store.add_history(state, history_entry("evil\x1b[2Jtool", "reject", "", [], "2026-12-02T16:21:00Z"))

    shown = await gateway_cli("sessions", "show", "agent", "run-9", *admin)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "  Labels:    untrusted, secret" in lines
    assert "  Tallies:   recipients = 1, transferred = 700.0" in lines
    assert "  Seen (recipients): a@example.test" in lines
    history = lines[lines.index("  Latest calls (oldest first):") + 1:]
    assert history[-2:] == ["    2026-12-02T16:20:00Z  mail_read — allow (rule web-is-untrusted)  added: untrusted",
                            "    2026-12-02T16:21:00Z  evil\\x1b[2Jtool — reject"]  # the terminal is not driven

    assert (await gateway_cli("sessions", "reset", "agent", "run-9", *admin)).returncode == 0
    after = await gateway_cli("sessions", "show", "agent", "run-9", *admin)
    assert "  Labels:    none" in after.stdout.splitlines()
    assert "Tallies" not in after.stdout and "Seen" not in after.stdout and "Latest calls" not in after.stdout
