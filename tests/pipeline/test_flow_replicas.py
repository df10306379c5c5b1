"""Two gateway processes (`gateway serve`) on one PostgreSQL database, 200 calls racing one run's spend cap across
both: the admitted total never passes the cap, and the upstream ran exactly the admitted calls.

The cap is checked and counted inside the store's admission (gateway/pipeline/flow_step.py,
gateway/store/admission.py): a transaction that locks the run before it reads the tallies, so the two processes
never both read the same total."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest
import pytest_asyncio
import yaml
from flow_support import cap_rule, policy, sum_tally
from loopback import serve_app
from postgres_cluster import Cluster, running_cluster
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth.keys import hash_key

pytestmark = [pytest.mark.session_loop, pytest.mark.slow]  # two processes to start: seconds on a loaded machine

KEY = "alice-flow-replicas-key"
CAP = policy("caps", tallies=[sum_tally(tools=["up_transfer"])], rules=[cap_rule(tools=["up_transfer"])])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def payments() -> AsyncIterator[tuple[collections.Counter[str], str]]:
    """An upstream that counts each transfer it carries out (by run tag), and its URL."""
    ran: collections.Counter[str] = collections.Counter()

    async def transfer(request: Request) -> JSONResponse:
        body = await request.json()
        ran[str(body.get("tag"))] += 1
        return JSONResponse({"moved": body.get("amount")})

    app = Starlette(routes=[Route("/transfer", transfer, methods=["POST"])])
    async with serve_app(app, lifespan="off", options={"limit_concurrency": 4000}) as url:
        yield ran, url


@contextlib.contextmanager
def _gateways(root: Path, dsn: str, upstream: str) -> Iterator[list[str]]:
    """Two `gateway serve` processes on the database ``dsn``; their base URLs."""
    (root / "policies").mkdir()
    (root / "policies" / "caps.yaml").write_text(CAP)
    schema = {"type": "object", "properties": {"amount": {"type": "number"}, "tag": {"type": "string"}}}
    config = {
        "policies": ["policies"],
        "store": {"postgres": {"dsn": {"env": "GATEWAY_TEST_DSN"}}},
        "auth": {"api_keys": [{"principal": {"id": "alice"}, "sha256": hash_key(KEY)}]},
        "http": {"max_connections": 1000, "max_connections_per_principal": 400},  # 100 at once on each
        "limits": {"call_timeout": 60, "per_principal": {"max_concurrent_calls": 1000, "calls_per_minute": 100000}},
        "upstreams": [{"name": "up", "http": {"base_url": upstream, "timeout": 60, "tools": [
            {"name": "transfer", "method": "POST", "path": "/transfer", "input_schema": schema}]}}],
    }
    procs, urls = [], []
    try:
        for name in ("A", "B"):
            port = _free_port()
            # each process its own audit file: one writer per file, each file one chain (docs/observability.md)
            own = {**config, "audit": {"file": f"audit-{name}.jsonl"}}
            (root / f"gateway-{name}.yaml").write_text(yaml.safe_dump(own))
            with (root / f"{name}.log").open("ab") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "gateway", "serve", str(root / f"gateway-{name}.yaml"), "--port", str(port),
                     "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=log, cwd=root,
                    env={**os.environ, "GATEWAY_TEST_DSN": dsn}))
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _ready(url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    async with httpx2.AsyncClient() as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx2.HTTPError):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway at {url} never became ready: {log.read_text()}")


async def test_two_hundred_calls_across_two_processes_never_pass_the_runs_cap(
        tmp_path: Path, cluster: Cluster, payments: tuple[collections.Counter[str], str]) -> None:
    ran, upstream = payments
    with _gateways(tmp_path, cluster.new_database(), upstream) as urls:
        await asyncio.gather(*(_ready(url, tmp_path / f"{n}.log") for url, n in zip(urls, "AB", strict=True)))
        clients = [httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"},
                                      timeout=httpx2.Timeout(120), limits=httpx2.Limits(max_connections=1000))
                   for url in urls]
        try:
            responses = await asyncio.gather(*(
                clients[n % 2].post("/v1/tools/up_transfer/invoke", json={
                    "arguments": {"amount": 10, "tag": "race"}, "session_id": "one-run"})
                for n in range(200)))
        finally:
            for client in clients:
                await client.aclose()

    decisions = collections.Counter(r.json()["decision"] for r in responses)
    assert decisions == {"allow": 100, "reject": 100}
    assert ran["race"] == 100  # at the upstream itself: exactly the admitted transfers ran
