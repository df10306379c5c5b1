"""Two gateway processes (`gateway serve`) on one PostgreSQL: what one does, the other honours.

A cheap HTTP upstream in the test process counts every execution, so "exactly once" is checked
where it matters: at the upstream. The two replicas of each backend serve the whole module (a test that
kills or stops one has it started again for the next); each test has an upstream of its own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
import pytest_asyncio
import yaml
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.keys import hash_key

# The replicas and their upstream serve the whole module, so its async tests run in the session loop with them.
pytestmark = pytest.mark.session_loop

KEYS = {"alice": "alice-mp-key-1", "bob": "bob-mp-key-2", "dave": "dave-mp-key-3"}

POLICY = """policy: multi
rules:
  - id: deploys-need-bob
    tools: [up_deploy]
    action: approve
    message: Deploys need a human.
    approval: {approvers: ["bob"], timeout: 120s, on_timeout: reject}
  - id: stop-word
    tools: [up_ping]
    when: args.text == "stop"
    action: terminate
    message: Stopped by policy.
  - id: four-pings-per-run
    tools: [up_ping]
    when: session.calls >= 4
    action: reject
    message: Budget spent.
"""


class Upstream:
    """Counts runs by tag; a run may take a while (``seconds``), or last until the test sets ``released``
    (``until_released``: no race with a slow machine)."""

    def __init__(self) -> None:
        self.runs: collections.Counter[str] = collections.Counter()
        self.started: collections.Counter[str] = collections.Counter()
        self.released = asyncio.Event()

    def app(self) -> Starlette:
        async def run(request: Request) -> JSONResponse:
            body = await request.json()
            tag = str(body.get("tag", ""))
            self.started[tag] += 1
            if body.get("until_released"):
                await asyncio.wait_for(self.released.wait(), 120)
            else:
                await asyncio.sleep(float(body.get("seconds", 0)))
            self.runs[tag] += 1
            return JSONResponse({"tag": tag, "run": self.runs[tag]})

        async def ping(request: Request) -> JSONResponse:
            self.runs["ping"] += 1
            return JSONResponse({"pong": True})

        return Starlette(routes=[Route("/run", run, methods=["POST"]), Route("/ping", ping, methods=["POST"])])


def _tools() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"tag": {"type": "string"}, "seconds": {"type": "number"},
                                               "until_released": {"type": "boolean"}}}
    return [{"name": "deploy", "method": "POST", "path": "/run", "input_schema": schema},
            {"name": "ping", "method": "POST", "path": "/ping",
             "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    """One `gateway serve` process (``env``: more environment for it)."""

    def __init__(self, config: Path, name: str, env: dict[str, str] | None = None) -> None:
        self.config, self.name, self.env = config, name, env or {}
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = config.parent / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", str(self.config),
                                          "--port", str(self.port), "--log-level", "warning"],
                                         stdout=subprocess.DEVNULL, stderr=log, cwd=self.config.parent,
                                         env={**os.environ, **self.env})

    @property
    def running(self) -> bool:
        """Started and not exited (nor killed) since."""
        return self.proc is not None and self.proc.poll() is None

    async def ready(self) -> None:
        deadline = time.monotonic() + 60
        async with httpx2.AsyncClient() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
                with contextlib.suppress(httpx2.HTTPError):
                    if (await client.get(f"{self.url}/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} never became ready: {self.log.read_text()}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, who: str, timeout: float = 120) -> httpx2.AsyncClient:
        # Idle connections are dropped after 2 s, well before uvicorn's 5 s keep-alive: a stalled loop never
        # reuses a connection the gateway is closing (a ReadError that says nothing about the gateway).
        return httpx2.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {KEYS[who]}"},
                                  timeout=httpx2.Timeout(timeout),
                                  limits=httpx2.Limits(max_connections=1000, keepalive_expiry=2))


class _Plug:
    """The module's one upstream server hands each request to the ``Upstream`` of the test running when it came
    in: the replicas outlive a test, and a call a test left running upstream (its gateway was killed) still
    counts in that test's ``Upstream``, never in the next test's."""

    def __init__(self) -> None:
        self.app: ASGIApp = Upstream().app()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def _upstream_server() -> AsyncIterator[tuple[_Plug, str]]:
    plug = _Plug()
    async with serve_app(plug, lifespan="off", options={"limit_concurrency": 4000, "backlog": 4096}) as url:
        yield plug, url


@pytest.fixture
def upstream(_upstream_server: tuple[_Plug, str]) -> tuple[Upstream, str]:
    """A fresh counting upstream for this test (behind the module's server) and its URL."""
    plug, url = _upstream_server
    counting = Upstream()
    plug.app = counting.app()
    return counting, url


def _own_audit_file(config: Path, name: str) -> Path:
    """A copy of ``config`` beside it whose audit file is ``audit-NAME.jsonl``: one writer per audit file."""
    copy = config.with_name(f"gateway-{name}.yaml")
    copy.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "audit": {"file": f"audit-{name}.jsonl"}}))
    return copy


def _write_config(root: Path, store: dict[str, Any], upstream_url: str) -> Path:
    (root / "policies").mkdir()
    (root / "policies" / "multi.yaml").write_text(POLICY)
    config = {
        "policies": ["policies"],
        "store": store,
        "audit": {"file": "audit.jsonl"},
        "auth": {"api_keys": [
            {"principal": {"id": "alice", "groups": ["dev"]}, "sha256": hash_key(KEYS["alice"])},
            {"principal": {"id": "bob", "groups": ["ops"]}, "sha256": hash_key(KEYS["bob"]), "approver": True},
            {"principal": {"id": "dave", "groups": ["ops"]}, "sha256": hash_key(KEYS["dave"]), "approver": True,
             "admin": True}]},
        "limits": {"call_timeout": 60, "per_principal": {"max_concurrent_calls": 5000, "calls_per_minute": 100000,
                                                         "max_held_calls": 5000}},  # a thousand held at once
        "http": {"max_connections": 5000},
        "upstreams": [{"name": "up", "http": {"base_url": upstream_url, "tools": _tools(), "timeout": 60}}],
    }
    path = root / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _postgres(dsn: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The store section for this database (claims lease for 2 s, so a dead replica is noticed fast), and the
    environment that holds its DSN."""
    return {"postgres": {"dsn": {"env": "GATEWAY_TEST_DSN"}}, "lease": "2s"}, {"GATEWAY_TEST_DSN": dsn}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, _upstream_server: tuple[_Plug, str],
             request: pytest.FixtureRequest) -> Iterator[tuple[Gateway, Gateway]]:
    """Gateways A and B on one PostgreSQL database, or on one SQLite file (``indirect`` "sqlite"), for the
    whole module: starting two gateways costs seconds; every test names its own runs, calls and tags."""
    backend = request.param
    if backend == "postgres":
        store, env = _postgres(request.getfixturevalue("pg_cluster").new_database())
    else:
        store, env = {"sqlite": "data/shared.sqlite3", "shared": True, "lease": "2s"}, {}
    path = _write_config(tmp_path_factory.mktemp(f"replicas-{backend}"), store, _upstream_server[1])
    a, b = Gateway(path, "A", env), Gateway(_own_audit_file(path, "B"), "B", env)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        for gateway in (a, b):  # both shut down at once
            if gateway.running:
                assert gateway.proc is not None
                gateway.proc.terminate()
        a.stop()
        b.stop()


@pytest.fixture
def pair(replicas: tuple[Gateway, Gateway], upstream: tuple[Upstream, str]) -> tuple[Gateway, Gateway]:
    """The module's replicas, each started again when a test before killed or stopped it (a fresh
    ``upstream`` is plugged in first)."""
    for gateway in replicas:
        if not gateway.running:
            gateway.start()
    return replicas


@pytest.fixture
def single(tmp_path: Path, upstream: tuple[Upstream, str], postgres_dsn: str) -> Iterator[Gateway]:
    """One gateway of its own on its own PostgreSQL database (a test that drops the database's connections)."""
    store, env = _postgres(postgres_dsn)
    gateway = Gateway(_write_config(tmp_path, store, upstream[1]), "A", env)
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()


async def _ready(pair: tuple[Gateway, Gateway]) -> None:
    await asyncio.gather(*(g.ready() for g in pair))


async def _pending(gateway: Gateway, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` requests are pending (as the admin sees them); those requests."""
    deadline = time.monotonic() + 120
    async with gateway.client("dave") as admin:
        while True:
            listing = (await admin.get("/v1/approvals", params={"state": "pending", "limit": 1})).json()
            if listing["total"] >= count:
                break
            assert time.monotonic() < deadline, listing["total"]
            await asyncio.sleep(0.2)
        found: list[dict[str, Any]] = []
        while len(found) < count:  # pages of at most 500
            page = await admin.get("/v1/approvals", params={"state": "pending", "limit": 500, "offset": len(found)})
            found.extend(page.json()["approvals"])
        return found


@pytest.mark.parametrize("replicas", ["postgres", "sqlite"], indirect=True)
async def test_an_approval_decided_through_b_releases_the_call_held_on_a(pair, upstream) -> None:
    a, b = pair
    counting, _ = upstream
    await _ready(pair)
    async with a.client("alice") as alice, b.client("bob") as bob:
        # The call holds for 240 s; answered within 60 s of the decision, it was woken by the notification
        # (SQLite: its poll), not by the end of its wait: no clock is read, so a loaded machine cannot fail it.
        held = asyncio.create_task(alice.post("/v1/tools/up_deploy/invoke", params={"wait": "240s"},
                                              json={"arguments": {"tag": "one"}, "call_id": "deploy-1"}))
        [request] = await _pending(b, 1)
        vote = await bob.post(f"/v1/approvals/{request['id']}/decision", json={"approve": True})
        assert vote.status_code == 200, vote.text
        response = await asyncio.wait_for(held, 60)
    body = response.json()
    assert (response.status_code, body["is_error"], body["structured"]) == (200, False, {"tag": "one", "run": 1})
    assert counting.runs["one"] == 1


@pytest.mark.parametrize("replicas", ["postgres", "sqlite"], indirect=True)
async def test_a_budget_is_spent_across_a_and_b(pair, upstream) -> None:
    a, b = pair
    counting, _ = upstream
    await _ready(pair)
    run = {"session_id": "budget-run"}
    decisions = []
    async with a.client("alice") as on_a, b.client("alice") as on_b:
        for n in range(6):
            client = on_a if n % 2 == 0 else on_b
            response = await client.post("/v1/tools/up_ping/invoke",
                                          json={"arguments": {"text": "hi"}, "call_id": f"p{n}", **run})
            decisions.append(response.json()["decision"])
        # and many at once, split across both: every one counted, none lost
        many = [(on_a if n % 2 else on_b).post("/v1/tools/up_ping/invoke",
                                               json={"arguments": {"text": "hi"}, "session_id": f"wide-{n % 4}"})
                for n in range(80)]
        await asyncio.gather(*many)
    assert decisions == ["allow"] * 4 + ["reject"] * 2
    async with b.client("dave") as admin:
        counted = [(await admin.get(f"/v1/admin/sessions/alice/wide-{n}")).json() for n in range(4)]
    assert [s["calls"] for s in counted] == [20, 20, 20, 20]  # the budget rule saw 4 (then rejected the rest)
    assert counting.runs["ping"] == 4 + 4 * 4


@pytest.mark.parametrize("replicas", ["postgres", "sqlite"], indirect=True)
async def test_a_terminate_on_a_is_seen_on_b(pair) -> None:
    a, b = pair
    await _ready(pair)
    run = {"session_id": "ends-here"}
    async with a.client("alice") as on_a, b.client("alice") as on_b:
        stopped = await on_a.post("/v1/tools/up_ping/invoke", json={"arguments": {"text": "stop"}, **run})
        after = await on_b.post("/v1/tools/up_ping/invoke", json={"arguments": {"text": "hi"}, **run})
    assert stopped.json()["decision"] == "terminate"
    body = after.json()
    assert (body["decision"], body["content"][0]["text"]) == ("terminated", "Stopped by policy.")
    # a mixed fleet is visible: both say their policy revision, in /readyz and in every audit event
    async with httpx2.AsyncClient() as plain:
        revisions = {(await plain.get(f"{g.url}/readyz")).json()["revision"] for g in pair}
    events = [json.loads(line) for line in (a.config.parent / "audit.jsonl").read_text().splitlines()]
    assert len(revisions) == 1 and None not in revisions
    assert events and all(e.get("revision") in revisions for e in events), events


@pytest.mark.parametrize("replicas", ["postgres", "sqlite"], indirect=True)
async def test_a_killed_gateway_leaves_its_call_interrupted_and_never_run_twice(pair, upstream) -> None:
    a, b = pair
    counting, _ = upstream
    await _ready(pair)
    call = {"arguments": {"tag": "slow", "seconds": 30}, "call_id": "deploy-slow"}
    async with a.client("alice") as on_a, b.client("alice") as on_b, b.client("bob") as bob:
        first = asyncio.create_task(on_a.post("/v1/tools/up_deploy/invoke", params={"wait": "1s"}, json=call))
        [request] = await _pending(b, 1)
        assert (await first).json()["decision"] == "pending"
        await bob.post(f"/v1/approvals/{request['id']}/decision", json={"approve": True})
        running = asyncio.create_task(on_a.post("/v1/tools/up_deploy/invoke", params={"wait": "60s"}, json=call))
        deadline = time.monotonic() + 30
        while counting.started["slow"] == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        a.kill()  # mid-call: its claim is never renewed again
        with contextlib.suppress(httpx2.HTTPError):
            await running
        retry = await on_b.post("/v1/tools/up_deploy/invoke", params={"wait": "30s"}, json=call)
        again = await on_b.post("/v1/tools/up_deploy/invoke", params={"wait": "5s"}, json=call)
    body = retry.json()
    assert (body["decision"], body["is_error"]) == ("interrupted", True), body
    assert again.json()["decision"] == "interrupted"
    assert counting.started["slow"] == 1  # it started once, on A, and B never ran it again


@pytest.mark.slow  # two gateway replicas, one started while the other runs a call: >10 s loaded
@pytest.mark.parametrize("replicas", ["postgres", "sqlite"], indirect=True)
async def test_a_replica_starting_leaves_anothers_running_call_alone(pair, upstream) -> None:
    a, b = pair
    counting, _ = upstream
    await _ready(pair)
    call = {"arguments": {"tag": "long", "until_released": True}, "call_id": "deploy-long"}
    async with a.client("alice") as on_a, b.client("bob") as bob:
        first = await on_a.post("/v1/tools/up_deploy/invoke", params={"wait": "0s"}, json=call)
        await bob.post(f"/v1/approvals/{first.json()['approval_id']}/decision",
                       json={"approve": True})
        running = asyncio.create_task(on_a.post("/v1/tools/up_deploy/invoke", params={"wait": "60s"}, json=call))
        deadline = time.monotonic() + 30
        while counting.started["long"] == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        b.stop()
        b.start()  # recovers at start: A's claim is live (renewed every 0.4s), so it is left alone
        await b.ready()
        assert not running.done(), "the call ended before the test released it"
        counting.released.set()
        response = await running
    body = response.json()
    assert (body["is_error"], body["structured"]) == (False, {"tag": "long", "run": 1}), body
    assert counting.started["long"] == 1


async def test_a_dropped_database_connection_refuses_one_call_clearly_then_reconnects(single, postgres_dsn) -> None:
    a = single
    await a.ready()
    run = {"session_id": "outage"}
    async with a.client("alice") as alice:
        before = await alice.post("/v1/tools/up_ping/invoke", json={"arguments": {"text": "hi"}, **run})
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # a failover drops every connection
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        during = await alice.post("/v1/tools/up_ping/invoke", json={"arguments": {"text": "hi"}, **run})
        after = await alice.post("/v1/tools/up_ping/invoke", json={"arguments": {"text": "hi"}, **run})
    assert before.json()["decision"] == "allow"
    body = during.json()
    assert (during.status_code, body["decision"], body["is_error"]) == (200, "store_unavailable", True), body
    assert "database could not be read" in body["content"][0]["text"]
    assert after.json()["decision"] == "allow"


@pytest.mark.slow  # a thousand held calls through two replicas: ~50 s on a loaded 2-core machine
@pytest.mark.parametrize("replicas", ["postgres"], indirect=True)
async def test_a_thousand_held_approvals_split_across_both_each_run_once(pair, upstream) -> None:
    a, b = pair
    counting, _ = upstream
    await _ready(pair)
    total = 1000
    async with a.client("alice") as on_a, b.client("alice") as on_b, a.client("bob") as bob_a, \
            b.client("bob") as bob_b:
        held = [asyncio.create_task((on_a if n % 2 else on_b).post(
            "/v1/tools/up_deploy/invoke", params={"wait": "120s"},
            json={"arguments": {"tag": f"t{n}"}, "call_id": f"many-{n}"})) for n in range(total)]
        pending = await _pending(a, total)
        semaphore = asyncio.Semaphore(50)

        async def decide(n: int, request: dict[str, Any]) -> int:
            async with semaphore:  # decided through the other gateway than the one holding it, half the time
                vote = await (bob_a if n % 2 else bob_b).post(f"/v1/approvals/{request['id']}/decision",
                                                              json={"approve": True})
                return vote.status_code

        votes = await asyncio.gather(*(decide(n, r) for n, r in enumerate(pending)))
        responses = await asyncio.gather(*held)
    assert set(votes) == {200}
    bodies = [r.json() for r in responses]
    assert [b["is_error"] for b in bodies].count(False) == total, [b for b in bodies if b["is_error"]][:3]
    assert len(counting.runs) == total and set(counting.runs.values()) == {1}


@pytest.fixture(autouse=True)
def _unique() -> str:
    return uuid.uuid4().hex
