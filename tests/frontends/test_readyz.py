"""/readyz: readiness with each upstream's state, open like /healthz and telling no secret or path."""

from __future__ import annotations

import json
import socket

import httpx2
import pytest
from loopback import serve_app
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

FAST = {"retry_first": 0.05, "retry_max": 0.2, "check_interval": 0.1}
PING = [{"name": "ping", "method": "GET", "path": "/ping"}]


@pytest.fixture
def unused_port() -> int:
    """A port nothing listens on now (a test may start a server on it later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ping_app() -> Starlette:
    async def ping(request: object) -> JSONResponse:
        return JSONResponse({"pong": True})

    return Starlette(routes=[Route("/ping", ping)])


async def test_readyz_goes_from_503_to_200_when_the_last_upstream_comes_up(start_gateway, configs, http_api,
                                                                         unused_port, until):
    gateway = await start_gateway(
        configs.base(configs.http_upstream("api", http_api.url),
                     configs.http_upstream("late", f"http://127.0.0.1:{unused_port}", PING), supervision=FAST),
        {"p.yaml": "policy: p\nrules: []\n"})
    async with httpx2.AsyncClient(base_url=gateway.url) as anyone:  # no key
        response = await anyone.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert (body["status"], body["revision"]) == ("not_ready", gateway.gateway.policies.current.revision)
        states = {u["name"]: (u["state"], u["last_error"], u["tools"]) for u in body["upstreams"]}
        assert states == {"api": ("up", None, 6), "late": ("down", "not reachable", 1)}
        assert (await anyone.get("/healthz")).status_code == 200  # liveness: the gateway itself is fine

        async with serve_app(ping_app(), port=unused_port):
            async def ready() -> httpx2.Response | None:
                answer = await anyone.get("/readyz")
                return answer if answer.status_code == 200 else None

            body = (await until(ready)).json()
            assert body["status"] == "ready"
            assert [(u["name"], u["state"]) for u in body["upstreams"]] == [("api", "up"), ("late", "up")]


async def test_readyz_with_no_upstreams_is_ready(start_gateway, configs):
    gateway = await start_gateway(configs.base(), {"p.yaml": "policy: p\nrules: []\n"})
    async with httpx2.AsyncClient(base_url=gateway.url) as anyone:
        response = await anyone.get("/readyz")
    assert (response.status_code, response.json()["status"], response.json()["upstreams"]) == (200, "ready", [])


async def test_readyz_tells_no_secret_url_or_path(start_gateway, configs, unused_port, tmp_path, monkeypatch):
    secret_dir = tmp_path / "secret-place-7f3a"
    monkeypatch.setenv("READYZ_TOKEN", "tok-9c41b7e2")
    gateway = await start_gateway(configs.base(
        {"name": "tool-server", "mcp": {"command": str(secret_dir / "server-bin"), "args": ["--token", "tok-arg-55"]}},
        {"name": "remote", "mcp": {"url": f"http://127.0.0.1:{unused_port}/mcp?key=query-secret-1",
                                   "headers": {"Authorization": {"env": "READYZ_TOKEN"}}}},
        supervision=FAST), {"p.yaml": "policy: p\nrules: []\n"})
    async with httpx2.AsyncClient(base_url=gateway.url) as anyone:
        response = await anyone.get("/readyz")
    assert response.status_code == 503
    text = response.text
    for secret in (str(secret_dir), "server-bin", "tok-arg-55", "tok-9c41b7e2", "query-secret-1", str(unused_port),
                   "127.0.0.1", str(gateway.root)):
        assert secret not in text, secret
    assert {u["name"]: u["last_error"] for u in json.loads(text)["upstreams"]} == \
        {"tool-server": "cannot connect", "remote": "cannot connect"}
