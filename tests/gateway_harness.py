"""End-to-end fixtures: real upstreams, the real gateway under uvicorn, real clients; 127.0.0.1 only.

    upstream MCP server   upstream_mcp_server.py over stdio, launched by the gateway itself
    upstream HTTP API     a small Starlette app under uvicorn (``http_api``), recording each request
    the gateway           gateway.yaml + policies written into a tmp dir, ``load_config`` → ``build_app``
                          → uvicorn on a free port (``shared_gateway`` once per session; ``start_gateway``
                          for tests that change files, restart, or break things)
    clients               the SDK's MCP ``Client`` (legacy mode) over httpx2, and httpx2 for REST

Every async test and fixture here runs in the one session-wide event loop, so servers started once
serve every test (starting the stdio upstream costs seconds). Fixture setup and teardown run in
different tasks, and anyio cancel scopes must be left by the task that entered them, so anything
built on anyio task groups (the MCP client) is held open by an owner task (``_hold``).

Helpers are handed out as fixtures, not imported (see tests/conftest.py for why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import pytest_asyncio
import yaml
from approval_support import Bench, CountingUpstream
from loopback import serve_app
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from thirdparty import server_everything

from gateway.app import build_app, server_options
from gateway.auth.keys import hash_key
from gateway.config.load import LoadedConfig, load_config
from gateway.pipeline import Gateway

HERE = Path(__file__).parent
UPSTREAM_SERVER = HERE / "upstream_mcp_server.py"

# API keys the test configs accept (only their SHA-256 goes into gateway.yaml).
KEYS = {"alice": "alice-key-4f1c9e", "bob": "bob-key-77d2a0"}
PRINCIPALS = {"alice": {"id": "alice", "groups": ["admins", "staff"]}, "bob": {"id": "bob", "groups": ["staff"]}}

STARTUP_SECONDS = 30.0  # launching the stdio upstream imports the MCP SDK: seconds on a busy machine
SHUTDOWN_SECONDS = 10.0

# The shared gateway's call timeout: long enough for any quick call on a loaded machine (an upstream
# that logs a traceback took over 2 s under load), short enough that the timeout test stays fast.
SHARED_CALL_TIMEOUT = 5

# The policies of the shared gateway: one rule per action, plus principal- and schema-related rules.
MAIN_POLICY = """
policy: main
rules:
  - id: no-forbidden-echo
    tools: [up_echo]
    when: args.text == "forbidden"
    action: reject
    message: Echoing that word is not allowed.
  - id: dry-run-echo
    tools: [up_echo]
    when: args.text == "skip me"
    action: skip
    result: {result: dry run}
  - id: prefix-echo
    tools: [up_echo]
    when: args.text.startsWith("rw:")
    action: rewrite
    rewrite:
      set: {text: '"rewritten " + args.text'}
  - id: strip-password
    tools: [up_echo]
    when: has(args.password)
    action: rewrite
    rewrite: {remove: [password]}
  - id: end-session
    tools: [up_echo]
    when: args.text == "terminate"
    action: terminate
    message: This session has been ended by policy.
  - id: thirteen-is-a-word
    tools: [up_add]
    when: args.a == 13
    action: rewrite
    rewrite:
      set: {b: '"thirteen"'}
  - id: secrets-for-admins
    tools: [up_secret]
    when: '!("admins" in principal.groups)'
    action: reject
    message: Only admins may read secrets.
  - id: redact-access-keys
    tools: [up_secret]
    stage: response
    action: rewrite
    rewrite:
      redact: ['AKIA[0-9A-Z]{16}']
"""

Json = dict[str, Any]


# --- the event loop --------------------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the async tests of modules marked ``session_loop`` in the session loop, where the shared servers live."""
    marker = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if pytest_asyncio.is_async_test(item) and item.get_closest_marker("session_loop"):
            item.add_marker(marker, append=False)


# --- small helpers ---------------------------------------------------------------------------------


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Await ``check()`` until it returns something truthy; fail after ``timeout`` seconds (generous: a condition
    that holds is met at once on a quiet machine, and a loaded one must not fail a test that is right)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s (last value: {value!r})")
        await asyncio.sleep(interval)


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # the kernel picks a free port; keeping the socket avoids a race
    return sock


def serve(app: Any, options: Mapping[str, Any] | None = None) -> contextlib.AbstractAsyncContextManager[str]:
    """Run an ASGI app (with its lifespan) under uvicorn on 127.0.0.1 in this loop; yields its base URL."""
    return serve_app(app, startup=STARTUP_SECONDS, grace=5, shutdown=SHUTDOWN_SECONDS, options=options)


async def _hold(cm: contextlib.AbstractAsyncContextManager[Any]) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """Enter ``cm`` in an owner task that also leaves it; returns (value, release)."""
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def owner() -> None:
        try:
            async with cm as value:
                ready.set_result(value)
                await stop.wait()
        except BaseException as exc:
            if ready.done():
                raise
            ready.set_exception(exc)

    task = asyncio.create_task(owner())

    async def release() -> None:
        stop.set()
        await asyncio.wait_for(task, SHUTDOWN_SECONDS)

    return await ready, release


# --- the upstream HTTP API -------------------------------------------------------------------------


@dataclass
class HttpApi:
    """The running upstream HTTP API and the requests it has seen."""

    url: str
    requests: list[Json]

    def seen(self, marker: str) -> list[Json]:
        """Requests whose path, query or body mentions ``marker``."""
        return [r for r in self.requests if marker in json.dumps(r)]


def http_api_app(requests: list[Json]) -> Starlette:
    """A small REST service: items by id (path + query), item creation (JSON body), search, a 500, a nap."""

    async def record(request: Request) -> Json:
        body = await request.body()
        entry = {"method": request.method, "path": request.url.path, "raw_path": request.scope["raw_path"].decode(),
                 "query": dict(request.query_params), "body": json.loads(body) if body else None,
                 "headers": dict(request.headers)}
        requests.append(entry)
        return entry

    async def get_item(request: Request) -> JSONResponse:
        entry = await record(request)
        return JSONResponse({"id": request.path_params["item_id"], "query": entry["query"]})

    async def create_item(request: Request) -> JSONResponse:
        entry = await record(request)
        return JSONResponse({"created": entry["body"]}, status_code=201)

    async def delete_item(request: Request) -> JSONResponse:
        await record(request)
        return JSONResponse({"deleted": request.path_params["item_id"]})

    async def search(request: Request) -> JSONResponse:
        entry = await record(request)
        return JSONResponse({"query": entry["query"]})

    async def boom(request: Request) -> JSONResponse:
        await record(request)
        return JSONResponse({"error": "the widget store is on fire"}, status_code=500)

    async def nap(request: Request) -> JSONResponse:
        entry = await record(request)
        await asyncio.sleep(float(entry["query"].get("seconds", "0")))
        return JSONResponse({"slept": entry["query"]})

    return Starlette(routes=[
        Route("/items/{item_id}", get_item, methods=["GET"]),
        Route("/items/{item_id}", delete_item, methods=["DELETE"]),
        Route("/items", create_item, methods=["POST"]),
        Route("/search", search, methods=["GET"]),
        Route("/boom", boom, methods=["GET"]),
        Route("/nap", nap, methods=["GET"]),
    ])


def http_api_tools() -> list[Json]:
    """The `http:` upstream tool list that maps onto ``http_api_app``."""
    return [
        {"name": "get_item", "description": "One item.", "method": "GET", "path": "/items/{item_id}",
         "query": ["verbose"],
         "input_schema": {"type": "object", "required": ["item_id"],
                          "properties": {"item_id": {"type": "string"}, "verbose": {"type": "boolean"}}},
         "annotations": {"title": "Get an item", "readOnlyHint": True, "destructiveHint": False}},
        {"name": "create_item", "method": "POST", "path": "/items",
         "input_schema": {"type": "object", "required": ["name"],
                          "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}}},
         "annotations": {"readOnlyHint": False, "destructiveHint": False}},
        {"name": "delete_item", "method": "DELETE", "path": "/items/{item_id}",
         "input_schema": {"type": "object", "required": ["item_id"], "properties": {"item_id": {"type": "string"}}},
         "annotations": {"destructiveHint": True}},
        {"name": "search", "method": "GET", "path": "/search",
         "input_schema": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}}}},
        {"name": "boom", "method": "GET", "path": "/boom"},
        {"name": "nap", "method": "GET", "path": "/nap",
         "input_schema": {"type": "object", "properties": {"seconds": {"type": "number"}, "tag": {"type": "string"}}}},
    ]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def http_api() -> AsyncIterator[HttpApi]:
    """The upstream HTTP API, once per session."""
    requests: list[Json] = []
    async with serve(http_api_app(requests)) as url:
        yield HttpApi(url, requests)


@pytest.fixture(scope="session")
def closed_port() -> Any:
    """A port on 127.0.0.1 where nothing listens (bound, never listening: connections are refused)."""
    sock = _bound_socket()
    yield sock.getsockname()[1]
    sock.close()


# --- the gateway -----------------------------------------------------------------------------------


def api_keys(*names: str) -> list[Json]:
    """`auth.api_keys` entries for the named test principals."""
    return [{"principal": PRINCIPALS[n], "sha256": hash_key(KEYS[n])} for n in names]


def mcp_upstream(name: str = "up", **extra: Any) -> Json:
    """An upstream entry for the stdio test server."""
    return {"name": name, "mcp": {"command": sys.executable, "args": [str(UPSTREAM_SERVER)], **extra}}


def everything_upstream(name: str = "everything", **extra: Any) -> Json:
    """An upstream entry for the third-party reference server (server-everything from npm, over stdio)."""
    node, *args = server_everything()
    return {"name": name, "mcp": {"command": node, "args": args, **extra}}


def http_upstream(name: str, base_url: str, tools: list[Json] | None = None, options: Json | None = None,
                  **extra: Any) -> Json:
    """An `http:` upstream entry (``options`` go into its `http:` block, ``extra`` beside it)."""
    http = {"base_url": base_url, "tools": tools or http_api_tools(), **(options or {})}
    return {"name": name, **extra, "http": http}


def base_config(*upstreams: Json, **overrides: Any) -> Json:
    """A gateway.yaml as a dict: alice and bob's keys, files under ./data, policies in ./policies."""
    config: Json = {
        "policies": ["policies"],
        "env": {"stage": "test"},
        "store": {"sqlite": "data/gateway.sqlite3"},
        "audit": {"file": "data/audit.jsonl"},
        "auth": {"api_keys": api_keys("alice", "bob")},
        "limits": {"call_timeout": 10},
        "reload_interval": 0.1,
        "upstreams": list(upstreams),
    }
    config.update(overrides)
    return config


def write_gateway(root: Path, config: Json, policies: Mapping[str, str]) -> Path:
    """Write gateway.yaml and policies/NAME into ``root``; returns the config file."""
    (root / "policies").mkdir(parents=True, exist_ok=True)
    for name, text in policies.items():
        (root / "policies" / name).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    path = root / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@dataclass
class RunningGateway:
    """A gateway serving on loopback, with what tests need to look inside it."""

    url: str
    app: Starlette
    config: LoadedConfig

    @property
    def gateway(self) -> Gateway:
        """The call pipeline object itself."""
        gateway: Gateway = self.app.state.gateway
        return gateway

    @property
    def mcp_url(self) -> str:
        """The MCP endpoint."""
        return f"{self.url}/mcp"

    @property
    def root(self) -> Path:
        """The folder holding gateway.yaml."""
        return self.config.base

    @property
    def audit_path(self) -> Path:
        """The audit log file."""
        assert self.config.spec.audit.file is not None
        return self.config.path(self.config.spec.audit.file)

    def audit_events(self) -> list[Json]:
        """Every audit event written so far."""
        if not self.audit_path.is_file():
            return []
        return [json.loads(line) for line in self.audit_path.read_text(encoding="utf-8").splitlines() if line]

    def audit_event(self, call_id: str) -> Json:
        """The one outcome event of a call (fails if there is not exactly one)."""
        found = [e for e in self.audit_events() if e.get("call_id") == call_id and e.get("event") != "call.intent"]
        assert len(found) == 1, f"expected one audit event for {call_id}, found {len(found)}"
        return found[0]


@contextlib.asynccontextmanager
async def serve_gateway(config: LoadedConfig, gateway: Gateway | None = None) -> AsyncIterator[RunningGateway]:
    """Build the app (around ``gateway`` if given) and serve it as `gateway serve` would until the block ends."""
    app = build_app(config, gateway)
    async with serve(app, server_options(config)) as url:
        yield RunningGateway(url, app, config)


def run_gateway(config_file: Path) -> contextlib.AbstractAsyncContextManager[RunningGateway]:
    """Load a config and serve it until the block ends."""
    return serve_gateway(load_config(config_file))


StartGateway = Callable[..., Awaitable[RunningGateway]]


@pytest_asyncio.fixture(loop_scope="session")
async def start_gateway(tmp_path: Path) -> AsyncIterator[StartGateway]:
    """``await start_gateway(config, {"p.yaml": text}, root=None)``: a gateway stopped after the test."""
    stack = contextlib.AsyncExitStack()
    counter = iter(range(100))

    async def start(config: Json, policies: Mapping[str, str], root: Path | None = None) -> RunningGateway:
        where = root or tmp_path / f"gateway-{next(counter)}"
        where.mkdir(parents=True, exist_ok=True)
        running: RunningGateway = await stack.enter_async_context(run_gateway(write_gateway(where, config, policies)))
        return running

    yield start
    await stack.aclose()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def shared_gateway(tmp_path_factory: pytest.TempPathFactory, http_api: HttpApi,
                         closed_port: int) -> AsyncIterator[RunningGateway]:
    """One gateway for tests that change nothing: the stdio server (``up_*``), the HTTP API under the
    prefix ``web``, and a ``ghost`` upstream with an empty prefix whose port is closed (``ping``)."""
    root = tmp_path_factory.mktemp("shared-gateway")
    config = base_config(
        mcp_upstream("up"),
        http_upstream("api", http_api.url, prefix="web"),
        http_upstream("ghost", f"http://127.0.0.1:{closed_port}", [{"name": "ping", "method": "GET", "path": "/ping"}],
                      prefix=""),
        limits={"call_timeout": SHARED_CALL_TIMEOUT},
    )
    async with run_gateway(write_gateway(root, config, {"main.yaml": MAIN_POLICY})) as running:
        yield running


# --- clients ---------------------------------------------------------------------------------------


@dataclass
class McpConn:
    """An MCP client session through the gateway, and the session id the gateway gave it."""

    client: Client
    _ids: dict[str, str]
    notifications: list[Any] = field(default_factory=list)

    @property
    def session_id(self) -> str | None:
        """The `Mcp-Session-Id` of this connection."""
        return self._ids.get("session")

    async def call(self, tool: str, arguments: Json | None = None, call_id: str | None = None) -> types.CallToolResult:
        """Call a tool, naming the call so the audit event can be found."""
        meta = {"gateway/call_id": call_id} if call_id else None
        return await self.client.call_tool(tool, arguments or {}, meta=meta)

    async def tool_names(self) -> set[str]:
        """The names tools/list shows now (bypassing the client's cache)."""
        return {t.name for t in (await self.client.list_tools(cache_mode="refresh")).tools}


@contextlib.asynccontextmanager
async def mcp_connection(gateway: RunningGateway, who: str | None = "alice",
                         headers: Mapping[str, str] | None = None, mode: str = "legacy",
                         **client_options: Any) -> AsyncIterator[McpConn]:
    """An MCP client as ``who``, or with no key at all.

    ``mode`` is the SDK's: "legacy" (the 2025-11-25 handshake, so it gets a session id) by default, or
    "auto" / "2026-07-28" for the stateless era. ``client_options`` go to ``mcp.Client`` as they are
    (``sampling_callback``, ``elicitation_callback``, ``list_roots_callback``, ``logging_callback``, ...).
    """
    ids: dict[str, str] = {}
    notifications: list[Any] = []

    async def on_response(response: httpx2.Response) -> None:
        if value := response.headers.get("mcp-session-id"):
            ids["session"] = value

    async def on_message(message: Any) -> None:
        notifications.append(message)

    sent = dict(headers or {})
    if who is not None:
        sent["Authorization"] = f"Bearer {KEYS[who]}"
    http = httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(30, read=300),
                              event_hooks={"response": [on_response]})
    async with http, Client(streamable_http_client(gateway.mcp_url, http_client=http), mode=mode,  # type: ignore[arg-type]
                            message_handler=on_message, **client_options) as client:
        yield McpConn(client, ids, notifications)


Connect = Callable[..., contextlib.AbstractAsyncContextManager[McpConn]]


@pytest.fixture
def connect_mcp() -> Connect:
    """``async with connect_mcp(gateway, "bob") as conn``: an MCP session used inside one test."""
    return mcp_connection


@pytest_asyncio.fixture(loop_scope="session")
async def mcp_alice(shared_gateway: RunningGateway) -> AsyncIterator[McpConn]:
    """A fresh MCP session as alice on the shared gateway."""
    conn, release = await _hold(mcp_connection(shared_gateway, "alice"))
    yield conn
    await release()


RestFactory = Callable[..., httpx2.AsyncClient]


@pytest_asyncio.fixture(loop_scope="session")
async def rest() -> AsyncIterator[RestFactory]:
    """``rest(gateway, who="alice", session=None)``: an httpx2 client with the key and a session header
    (a fresh session id unless one is given); closed after the test."""
    clients: list[httpx2.AsyncClient] = []

    def make(gateway: RunningGateway, who: str | None = "alice", session: str | None = None) -> httpx2.AsyncClient:
        headers = {"X-Gateway-Session": session or f"s-{uuid.uuid4().hex}"}
        if who is not None:
            headers["Authorization"] = f"Bearer {KEYS[who]}"
        client = httpx2.AsyncClient(base_url=gateway.url, headers=headers, timeout=httpx2.Timeout(30))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
def call_id() -> Callable[[], str]:
    """Fresh call ids, to find a call's audit event."""
    return lambda: f"c-{uuid.uuid4().hex}"


@pytest.fixture
def keys() -> dict[str, str]:
    """The test principals' API keys."""
    return dict(KEYS)


class Configs:
    """Builders for gateway.yaml dicts and ways to run them (tests get this as ``configs``)."""

    base = staticmethod(base_config)
    mcp_upstream = staticmethod(mcp_upstream)
    everything_upstream = staticmethod(everything_upstream)
    http_upstream = staticmethod(http_upstream)
    api_keys = staticmethod(api_keys)
    write = staticmethod(write_gateway)
    load = staticmethod(load_config)
    run = staticmethod(run_gateway)
    serve = staticmethod(serve_gateway)


@pytest.fixture
def configs() -> type[Configs]:
    """Builders for gateway.yaml dicts: ``configs.base(...)``, ``.mcp_upstream()``, ``.write()``, ``.run()``."""
    return Configs


@pytest.fixture
def until() -> Callable[..., Awaitable[Any]]:
    """``await until(async_check, timeout=30)``: poll until the check returns something truthy."""
    return eventually


async def invoke(client: httpx2.AsyncClient, tool: str, arguments: Json | None = None, **body: Any) -> Json:
    """POST /v1/tools/{tool}/invoke and return the JSON body (any status)."""
    response = await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments or {}, **body})
    data: Json = response.json()
    data["_status"] = response.status_code
    return data


@pytest.fixture
def rest_call() -> Callable[..., Awaitable[Json]]:
    """``await rest_call(client, tool, args, call_id=...)``: the invoke response body, with ``_status``."""
    return invoke


# --- approvals: an upstream that counts runs, and gateways on it (see approval_support.py) ---------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def upstream() -> AsyncIterator[CountingUpstream]:
    async with CountingUpstream.serving() as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def bench(tmp_path: Path, configs: Any, upstream: CountingUpstream) -> AsyncIterator[Bench]:
    async with Bench.open(tmp_path, configs, upstream) as opened:
        yield opened
