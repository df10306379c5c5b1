"""Launched upstreams (a stdio MCP server, an HTTP service's `launch:`) never inherit the gateway's secrets.

Each test puts a secret into the gateway's own environment (this process: the gateway is served
in it), launches ``env_report_server.py`` through a real gateway and reads back, through a real
call, the environment the launched process actually got.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

HERE = Path(__file__).parents[1]  # tests/, where the reporting server lives
REPORTER = HERE / "env_report_server.py"

SECRET = "gateway-only-secret-5b1e"
PASSED = "passed-by-name-9c2d"
GLOBBED = "passed-by-prefix-0f3a"
EXPLICIT = "given-in-config-77e1"


@pytest.fixture
def gateway_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's environment: a secret nobody passes on, and variables the config passes by name."""
    monkeypatch.setenv("GATEWAY_DB_PASSWORD", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("REPORTER_TOKEN", PASSED)
    monkeypatch.setenv("TEAM_REGION", GLOBBED)
    monkeypatch.setenv("TEAM_ZONE", GLOBBED)
    monkeypatch.setenv("LC_TIME", "C")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _assert_minimal(env: dict[str, str]) -> None:
    assert SECRET not in json.dumps(env)
    assert "GATEWAY_DB_PASSWORD" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["REPORTER_TOKEN"] == PASSED  # env_passthrough by name
    assert env["TEAM_REGION"] == env["TEAM_ZONE"] == GLOBBED  # env_passthrough by prefix (TEAM_*)
    assert env["EXPLICIT_SETTING"] == EXPLICIT  # env:
    assert env["LC_TIME"] == "C"  # the minimal base keeps locale, PATH, HOME...
    assert "PATH" in env


@pytest.mark.usefixtures("gateway_secrets")
async def test_stdio_mcp_server_gets_a_minimal_environment(start_gateway: Any, configs: Any, rest: Any,
                                                             rest_call: Any) -> None:
    upstream = {"name": "rep", "mcp": {"command": sys.executable, "args": [str(REPORTER), "mcp"],
                                       "env": {"EXPLICIT_SETTING": EXPLICIT},
                                       "env_passthrough": ["REPORTER_TOKEN", "TEAM_*"]}}
    gateway = await start_gateway(configs.base(upstream), {"open.yaml": "policy: open\nrules: []\n"})
    result = await rest_call(rest(gateway), "rep_environment")
    assert result["_status"] == 200, result
    _assert_minimal(json.loads(result["content"][0]["text"]))


@pytest.mark.usefixtures("gateway_secrets")
async def test_launched_http_service_gets_a_minimal_environment(start_gateway: Any, configs: Any, rest: Any,
                                                                  rest_call: Any) -> None:
    port = _free_port()
    launch = {"command": sys.executable, "args": [str(REPORTER), "http", str(port)],
              "env": {"EXPLICIT_SETTING": EXPLICIT}, "env_passthrough": ["REPORTER_TOKEN", "TEAM_*"]}
    upstream = configs.http_upstream("rep", f"http://127.0.0.1:{port}",
                                     [{"name": "environment", "method": "GET", "path": "/environment"}],
                                     {"launch": launch})
    gateway = await start_gateway(configs.base(upstream), {"open.yaml": "policy: open\nrules: []\n"})
    result = await rest_call(rest(gateway), "rep_environment")
    assert result["_status"] == 200, result
    _assert_minimal(result["structured"] if result.get("structured") else json.loads(result["content"][0]["text"]))


def test_env_passthrough_names_are_checked_at_load(configs: Any, tmp_path: Path) -> None:
    upstream = {"name": "rep", "mcp": {"command": "x", "env_passthrough": ["NOT-A-NAME"]}}
    path = configs.write(tmp_path, configs.base(upstream), {})
    with pytest.raises(Exception, match="env_passthrough"):
        configs.load(path)
