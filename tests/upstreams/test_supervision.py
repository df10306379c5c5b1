"""Upstreams that fail and heal: the real gateway under uvicorn, real upstreams that are down, crash, come back.

The gateway's `supervision:` times are cut to a tenth of a second here so that each test takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import yaml
from loopback import serve_app
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import build_app, server_options
from gateway.auth.keys import hash_key
from gateway.config.load import load_config
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.registry import Source, ToolRegistry
from gateway.upstreams.supervise import Backoff, Supervisor

KEY = "supervision-key-5d1e"
FAST = {"retry_first": 0.05, "retry_max": 0.2, "check_interval": 0.1}
HERE = Path(__file__).parent
PID_SERVICE = HERE / "pid_service.py"
MCP_SERVER = HERE.parent / "upstream_mcp_server.py"
STARTUP_SECONDS = 30.0  # the stdio server imports the MCP SDK: seconds on a busy machine
Json = dict[str, Any]


def free_port() -> int:
    """A port nothing listens on now (the servers of these tests start on it later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 15.0) -> Any:
    """``check()`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s; last value: {value!r}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def gateway(root: Path, *upstreams: Json) -> AsyncIterator[httpx2.AsyncClient]:
    """A gateway with these upstreams, served on loopback; yields a REST client with a key."""
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    config = {"policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"},
              "audit": {"file": "data/audit.jsonl"}, "limits": {"call_timeout": 10}, "supervision": FAST,
              "auth": {"api_keys": [{"principal": {"id": "alice"}, "sha256": hash_key(KEY)}]},
              "upstreams": list(upstreams)}
    (root / "gateway.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    loaded = load_config(root / "gateway.yaml")
    async with serve_app(build_app(loaded), startup=STARTUP_SECONDS, options=server_options(loaded)) as url, \
            httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        yield client


async def tools(client: httpx2.AsyncClient) -> list[str]:
    response = await client.get("/v1/tools")
    assert response.status_code == 200, response.text
    return [t["name"] for t in response.json()["tools"]]


async def invoke(client: httpx2.AsyncClient, tool: str, arguments: Json | None = None) -> Json:
    response = await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments or {}})
    assert response.status_code == 200, response.text
    body: Json = response.json()
    return body


async def upstream_state(client: httpx2.AsyncClient, name: str) -> Json:
    response = await client.get("/readyz")
    found: Json = next(u for u in response.json()["upstreams"] if u["name"] == name)
    return {**found, "_status": response.status_code}


def pid_app() -> Starlette:
    """The HTTP service of these tests when the test itself serves it: GET /pid says who answered."""

    async def pid(request: Request) -> JSONResponse:
        return JSONResponse({"pid": os.getpid(), "served_by": "test"})

    return Starlette(routes=[Route("/pid", pid)])


def pid_upstream(name: str, port: int, launch: Json | None = None) -> Json:
    http: Json = {"base_url": f"http://127.0.0.1:{port}", "tools": [{"name": "pid", "method": "GET", "path": "/pid"}]}
    if launch is not None:
        http["launch"] = launch
    return {"name": name, "http": http}


def mcp_http_app() -> Starlette:
    """An MCP server over streamable HTTP with one tool, ``shout``."""
    server = MCPServer("later", version="0.1.0")

    @server.tool()
    def shout(text: str) -> str:
        """The text in capitals."""
        return text.upper()

    return server.streamable_http_app()


async def test_an_mcp_upstream_down_at_start_comes_up_and_its_tools_appear_without_a_restart(tmp_path):
    port = free_port()
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with gateway(tmp_path, {"name": "later", "mcp": {"url": f"http://127.0.0.1:{port}/mcp"}}) as client:
        assert await tools(client) == []  # nothing is known of it yet
        down = await upstream_state(client, "later")
        assert (down["_status"], down["state"], down["last_error"]) == (503, "down", "cannot connect")

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        endpoint = f"{str(client.base_url).rstrip('/')}/mcp"
        async with http, Client(streamable_http_client(endpoint, http_client=http), mode="legacy",
                                message_handler=on_message) as mcp:
            assert (await mcp.list_tools()).tools == []
            async with serve_app(mcp_http_app(), port=port):  # the upstream starts, on the same port
                assert await eventually(lambda: tools(client)) == ["later_shout"]
                result = await invoke(client, "later_shout", {"text": "back"})
                assert (result["decision"], result["content"][0]["text"]) == ("allow", "BACK")
                up = await upstream_state(client, "later")
                assert (up["_status"], up["state"], up["tools"]) == (200, "up", 1)

                # the MCP client connected before was told, and its next list has the tool
                await eventually(lambda: _async(any(isinstance(m, types.ToolListChangedNotification) for m in seen)))
                assert [t.name for t in (await mcp.list_tools()).tools] == ["later_shout"]


async def _async(value: Any) -> Any:
    return value


async def test_an_http_upstream_down_at_start_serves_calls_once_it_listens(tmp_path):
    port = free_port()
    async with gateway(tmp_path, pid_upstream("svc", port)) as client:
        down = await upstream_state(client, "svc")
        assert (down["_status"], down["state"], down["last_error"]) == (503, "down", "not reachable")
        failed = await invoke(client, "svc_pid")
        assert (failed["decision"], failed["is_error"]) == ("tool_failed", True)

        async with serve_app(pid_app(), port=port):
            answered = await invoke(client, "svc_pid")  # no restart, no wait: the next call reaches it
            assert (answered["decision"], answered["structured"]["served_by"]) == ("allow", "test")
            assert (await eventually(lambda: _state_is(client, "svc", "up")))["_status"] == 200

        # and when it goes away again, readiness says so
        down_again = await eventually(lambda: _state_is(client, "svc", "down"))
        assert (down_again["_status"], down_again["last_error"]) == (503, "not reachable")


async def _state_is(client: httpx2.AsyncClient, name: str, state: str) -> Json | None:
    found = await upstream_state(client, name)
    return found if found["state"] == state else None


def launched(port: int, launches: Path) -> Json:
    return {"command": sys.executable, "args": [str(PID_SERVICE), str(port), str(launches)]}


async def test_a_launched_service_that_exits_is_relaunched(tmp_path):
    port, launches = free_port(), tmp_path / "launches.txt"
    async with gateway(tmp_path, pid_upstream("svc", port, launched(port, launches))) as client:
        first = (await invoke(client, "svc_pid"))["structured"]
        assert first["served_by"] == "launched"
        os.kill(first["pid"], signal.SIGKILL)

        async def relaunched() -> Any:
            body = await invoke(client, "svc_pid")
            return body["decision"] == "allow" and body["structured"]["pid"] != first["pid"] and body["structured"]

        second = await eventually(relaunched)
        assert second["served_by"] == "launched"
        assert launches.read_text().split() == [str(first["pid"]), str(second["pid"])]
        assert (await eventually(lambda: _state_is(client, "svc", "up")))["_status"] == 200


async def test_an_mcp_stdio_upstream_that_crashes_is_restarted_without_a_call(tmp_path):
    stdio = {"name": "up", "mcp": {"command": sys.executable, "args": [str(MCP_SERVER)]}}
    async with gateway(tmp_path, stdio) as client:
        before = await upstream_state(client, "up")
        pid = (await invoke(client, "up_pid"))["structured"]["result"]
        os.kill(pid, signal.SIGKILL)

        # no call is made: the supervisor notices and starts it again on its own
        await eventually(lambda: _state_is(client, "up", "down"))
        after = await eventually(lambda: _state_is(client, "up", "up"), timeout=STARTUP_SECONDS)
        assert after["since"] >= before["since"]
        assert after["tools"] == before["tools"] > 0
        new_pid = (await invoke(client, "up_pid"))["structured"]["result"]
        assert new_pid != pid


async def test_a_taken_port_refuses_that_upstream_and_leaves_the_others_serving(tmp_path):
    port, launches = free_port(), tmp_path / "launches.txt"
    other = free_port()
    async with serve_app(pid_app(), port=port), serve_app(pid_app(), port=other), \
            gateway(tmp_path, pid_upstream("svc", port, launched(port, launches)), pid_upstream("fine", other)) \
            as client:
        refused = await upstream_state(client, "svc")
        assert (refused["_status"], refused["state"]) == (503, "down")
        assert refused["last_error"] == "port already in use by another process"
        assert not launches.exists()  # never launched
        call = await invoke(client, "svc_pid")  # and its calls never reach the process on its port
        assert (call["decision"], call["is_error"]) == ("tool_failed", True)
        assert "test" not in str(call)
        fine = await invoke(client, "fine_pid")
        assert (fine["decision"], fine["structured"]["served_by"]) == ("allow", "test")
        assert (await upstream_state(client, "fine"))["state"] == "up"

    # once the port is free the service is launched (a second gateway here: the first one stopped above)
    async with gateway(tmp_path / "again", pid_upstream("svc", port, launched(port, launches))) as client:
        assert (await invoke(client, "svc_pid"))["structured"]["served_by"] == "launched"


async def test_the_impostor_leaving_lets_the_refused_service_launch(tmp_path):
    port, launches = free_port(), tmp_path / "launches.txt"
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serve_app(pid_app(), port=port))
        async with gateway(tmp_path, pid_upstream("svc", port, launched(port, launches))) as client:
            assert (await upstream_state(client, "svc"))["state"] == "down"
            await stack.aclose()  # the other process goes away
            up = await eventually(lambda: _state_is(client, "svc", "up"))
            assert up["_status"] == 200
            assert (await invoke(client, "svc_pid"))["structured"]["served_by"] == "launched"


async def test_a_down_upstream_is_logged_once_not_per_retry(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="gateway.upstreams")
    port = free_port()
    async with gateway(tmp_path, pid_upstream("svc", port)) as client:
        await asyncio.sleep(1.0)  # at FAST's retry times that is several failed attempts
        async with serve_app(pid_app(), port=port):
            await eventually(lambda: _state_is(client, "svc", "up"))
            records = list(caplog.records)  # (when this server stops, that is a new outage and a new line)

    mine = [r for r in records if r.name == "gateway.upstreams" and "svc" in r.getMessage()]
    errors = [r for r in mine if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "svc is down" in errors[0].getMessage() and f"127.0.0.1:{port}" in errors[0].getMessage()
    retries = [r for r in mine if r.levelno == logging.DEBUG]
    assert len(retries) >= 3  # the retries happened, quietly
    back = [r for r in mine if r.levelno == logging.WARNING and "is back" in r.getMessage()]
    assert len(back) == 1


def test_the_wait_between_attempts_doubles_and_is_capped():
    backoff = Backoff(first=0.5, maximum=60.0)
    assert [backoff.delay(n) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.delay(10_000) == 60.0  # no overflow however long it has been down


async def test_a_long_outage_is_summarised_now_and_then(caplog):
    caplog.set_level(logging.DEBUG, logger="gateway.upstreams")
    upstream = HttpUpstream("gone", f"http://127.0.0.1:{free_port()}", [])
    supervisor = Supervisor(ToolRegistry([Source(upstream, lambda t: t)]), Backoff(0.02, 0.02, 0.02),
                            summary_seconds=0.3)
    try:
        await supervisor.start()
        await asyncio.sleep(1.0)
    finally:
        await supervisor.close()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "gateway.upstreams"]
    assert [m for level, m in lines if level == logging.ERROR] == \
        [f"upstream gone is down: gone: nothing answers on {upstream.base_url.removeprefix('http://')} "
         "(retrying in the background)"]
    summaries = [m for level, m in lines if level == logging.WARNING]
    assert 2 <= len(summaries) <= 4, summaries  # about one per 0.3 s, not one per 0.02 s retry
    assert all(m.startswith("upstream gone is still down: ") and "failed attempts since" in m for m in summaries)
    assert len([m for level, m in lines if level == logging.DEBUG]) > 10


FLAPPING = ("import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
            "open(sys.argv[2], 'a').write('launched\\n'); time.sleep(0.8); sys.exit(1)\n")


async def test_a_crash_loop_is_relaunched_and_logged_once(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="gateway.upstreams")
    port, launches = free_port(), tmp_path / "launches.txt"
    launch = {"command": sys.executable, "args": ["-c", FLAPPING, str(port), str(launches)]}
    def back() -> bool:  # a relaunch was seen answering (under load that may take a few flaps)
        return any(r.name == "gateway.upstreams" and " is back after " in r.getMessage() for r in caplog.records)

    async with gateway(tmp_path, pid_upstream("svc", port, launch)):
        await eventually(lambda: _async(back() and launches.read_text().count("\n") >= 4), timeout=120)
    mine = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "gateway.upstreams"]
    errors = [m for level, m in mine if level == logging.ERROR]
    assert errors == ["upstream svc is down: svc: the launched process exited with 1 (retrying in the background)"]
    # the first recovery is told; the later flaps are not (neither their "down" nor their "back")
    warnings = [m for level, m in mine if level == logging.WARNING]
    # how many relaunches fail before one answers depends on the machine's speed (the process lives 0.8 s)
    assert len(warnings) == 1 and re.fullmatch(r"upstream svc is back after \d+ failed attempts: 1 tools",
                                               warnings[0]), warnings


DEAF = ("import os, socket, sys, time\n"
        "open(sys.argv[2], 'a').write(f'{os.getpid()}\\n')\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(0.5); s.close(); time.sleep(3600)\n")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_launched_process_that_stops_listening_is_replaced_not_left_running(tmp_path):
    port, launches = free_port(), tmp_path / "launches.txt"
    launch = {"command": sys.executable, "args": ["-c", DEAF, str(port), str(launches)]}
    async with gateway(tmp_path, pid_upstream("svc", port, launch)):
        await eventually(lambda: _async(launches.exists() and launches.read_text().count("\n") >= 2))
        first = int(launches.read_text().split()[0])
        assert await eventually(lambda: _async(not alive(first)))  # stopped before its successor was launched
    assert not any(alive(int(pid)) for pid in launches.read_text().split())  # and the last one with the gateway
