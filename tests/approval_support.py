"""Helpers for the approval end-to-end tests (test_approvals_*.py): people, an upstream that counts, a bench.

    people       API keys with groups and the ``approver`` flag (``PEOPLE``); alice asks for calls
    upstream     ``CountingUpstream``: an MCP server over streamable HTTP in this process, behind the
                 gateway as the upstream ``ops`` (tools ``ops_deploy``, ``ops_vanishing``, ``ops_slow``). It records
                 every run, so "ran exactly once" is read from the upstream itself, and it can remove a
                 tool and send ``notifications/tools/list_changed``, which the stdio test server cannot.
    bench        ``Bench``: that upstream, gateways on it (conftest's ``configs`` builders), REST and MCP
                 clients per person, and the approver API calls the tests make again and again

conftest.py hands its helpers out as fixtures; this module is imported by name, which is unambiguous
(there is one ``approval_support``). Everything runs on 127.0.0.1 in the session event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import yaml
from loopback import serve_app
from mcp import Client, MCPError
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.app import build_app
from gateway.auth.keys import hash_key
from gateway.config.load import load_config

Json = dict[str, Any]

PUBLIC_URL = "http://approvals.example.test"  # approvals.public_url: progress messages link here
PAGE_URL = f"{PUBLIC_URL}/approvals"

# name -> (API key, groups, may decide approvals)
PEOPLE: dict[str, tuple[str, list[str], bool]] = {
    "alice": ("alice-appr-key-1", ["ops"], True),          # asks for the calls; an approver, but not of her own
    "bob": ("bob-appr-key-2", ["ops"], True),              # group A
    "carol": ("carol-appr-key-3", ["security"], True),     # group B
    "dave": ("dave-appr-key-4", ["ops", "security"], True),  # both groups
    "erin": ("erin-appr-key-5", ["sales"], True),          # an approver, but in no rule's approvers
    "frank": ("frank-appr-key-6", ["ops"], False),         # in the right group, but his key may not decide
}

STEP_SECONDS = 10.0  # the most any single step (a call, an approval showing up) may take before a test fails


def api_keys() -> list[Json]:
    """`auth.api_keys` for ``PEOPLE``."""
    return [{"principal": {"id": name, "groups": groups}, "sha256": hash_key(key), "approver": approver}
            for name, (key, groups, approver) in PEOPLE.items()]


def auth_header(who: str) -> dict[str, str]:
    """The Authorization header of one of ``PEOPLE``."""
    return {"Authorization": f"Bearer {PEOPLE[who][0]}"}


def policy(*rules: str) -> str:
    """A policy file whose rules are the given YAML snippets (each one list item)."""
    return "policy: approvals\nrules:\n" + "".join(rules)


def approve_rule(rule_id: str, tool: str = "ops_deploy", *, approvers: list[str] | None = None,
                 timeout: str | int = "30s", on_timeout: str = "reject", via: str = "page",
                 message: str = "Deploys need a human.") -> str:
    """One ``action: approve`` rule as YAML."""
    listed = ", ".join(f'"{a}"' for a in approvers or [])
    return (f"  - id: {rule_id}\n    tools: [{tool}]\n    action: approve\n    message: {message}\n"
            f"    approval: {{approvers: [{listed}], timeout: {timeout}, on_timeout: {on_timeout}, via: {via}}}\n")


# --- an upstream that counts -------------------------------------------------------------------------


class _ListChangedServer(Server[Any]):
    """The SDK's low-level server, advertising tools/list_changed (the session manager passes no options)."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), *args, **kwargs)


def transfer_tool() -> types.Tool:
    """``transfer``: pays ``amount`` to ``to`` (a ``memo`` the policies may set); put in ``CountingUpstream.tools``
    by tests that need a number to decide on (``reset`` takes it away again)."""
    return types.Tool(name="transfer", description="Pay an amount to someone.", input_schema={
        "type": "object", "required": ["to", "amount"], "additionalProperties": False,
        "properties": {"to": {"type": "string"}, "amount": {"type": "integer", "minimum": 1},
                       "memo": {"type": "string"}}})


def _tool(name: str, description: str, arg: str) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema={
        "type": "object", "required": [arg], "properties": {arg: {"type": "string"}}})


class CountingUpstream:
    """An MCP server whose tools record each run; a tool can be taken away while the gateway runs."""

    def __init__(self) -> None:
        self.url = ""  # set while ``serving``
        self.runs: list[tuple[str, Json]] = []
        self.tools: dict[str, types.Tool] = {}
        self._sessions: list[Any] = []  # every client session that listed tools: told when the list changes
        # 2026-07-28 clients (the gateway connects in that era when offered) hear of changes on listen streams
        self._bus = InMemorySubscriptionBus()
        self.server = _ListChangedServer("counting-upstream", version="0.1.0",
                                         on_list_tools=self._list_tools, on_call_tool=self._call_tool,
                                         on_subscriptions_listen=ListenHandler(self._bus))
        self.reset()

    def reset(self) -> None:
        """Every tool back, no runs: as new for the next test."""
        self.runs.clear()
        self.tools = {t.name: t for t in [_tool("deploy", "Deploy a service.", "service"),
                                          _tool("vanishing", "A tool that will be removed.", "note"),
                                          _tool("slow", "Take a while (``seconds``) to finish.", "seconds")]}
        self._sessions.clear()
        self.released = asyncio.Event()  # ``slow`` with seconds="until-released" runs until this is set
        self.running = 0  # runs under way now
        self.most_at_once = 0  # the most runs ever under way at once since the reset

    @classmethod
    @contextlib.asynccontextmanager
    async def serving(cls) -> AsyncIterator[CountingUpstream]:
        """A new upstream, served on loopback until the block ends (one per test module: stopping takes a while)."""
        upstream = cls()
        async with serve_app(upstream.app(), startup=STEP_SECONDS, shutdown=STEP_SECONDS) as url:
            upstream.url = url
            yield upstream

    def ran(self, tool: str, **args: Any) -> int:
        """How many times ``tool`` ran with arguments that include ``args``."""
        return sum(1 for name, seen in self.runs if name == tool and args.items() <= seen.items())

    async def remove_tool(self, name: str) -> None:
        """Take a tool away and tell every client that listed tools."""
        del self.tools[name]
        await self._bus.publish(ToolsListChanged())
        for session in self._sessions:
            with contextlib.suppress(Exception):  # a client that has gone away
                await session.send_tool_list_changed()

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if not any(s is ctx.session for s in self._sessions):
            self._sessions.append(ctx.session)
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in self.tools:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        args = dict(params.arguments or {})
        self.runs.append((params.name, args))  # counted when it starts: a run cut short still ran
        run = len(self.runs)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self._slow(params.name, str(args.get("seconds", "")))
        finally:
            self.running -= 1
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} done (run {run})")],
                                    structured_content={"tool": params.name, "args": args, "run": run})

    async def _slow(self, tool: str, seconds: str) -> None:
        """``slow`` takes ``seconds``; "until-released" runs until the test sets ``released``; "until-N-at-once"
        runs until N runs were under way at once (or 20 s): concurrency shown by a count, not a clock."""
        if tool != "slow":
            return
        if seconds == "until-released":
            await asyncio.wait_for(self.released.wait(), 120)  # the test says when: no race with a slow machine
        elif seconds.startswith("until-") and seconds.endswith("-at-once"):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(20):
                    while self.most_at_once < int(seconds.split("-")[1]):
                        await asyncio.sleep(0.01)
        else:
            await asyncio.sleep(float(seconds))

    def app(self) -> Starlette:
        """A Starlette app serving this server at /mcp (a new session manager each time: they run once)."""
        sessions = StreamableHTTPSessionManager(app=self.server)

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with sessions.run():
                yield

        return Starlette(routes=[Route("/mcp", StreamableHTTPASGIApp(sessions))], lifespan=lifespan)


# --- the bench -------------------------------------------------------------------------------------


class Bench:
    """A counting upstream, gateways in front of it, and clients for ``PEOPLE``; everything closed at the end."""

    def __init__(self, root: Path, configs: Any, stack: contextlib.AsyncExitStack, upstream: CountingUpstream) -> None:
        self.root = root
        self.configs = configs
        self.stack = stack
        self.upstream = upstream
        self._rest: dict[tuple[str, str], httpx2.AsyncClient] = {}
        self._count = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, root: Path, configs: Any, upstream: CountingUpstream) -> AsyncIterator[Bench]:
        """The bench on a running upstream (reset first); its gateways and clients are closed when it ends."""
        upstream.reset()
        async with contextlib.AsyncExitStack() as stack:
            yield cls(root, configs, stack, upstream)

    # gateways

    def write(self, policy_text: str, root: Path | None = None, call_timeout: str | None = None,
              **overrides: Any) -> Path:
        """gateway.yaml (the ``ops`` upstream, ``PEOPLE``'s keys, ``PUBLIC_URL``, then ``overrides``) and the
        policy, in ``root``. ``call_timeout``: how long a call may run, end to end and at the upstream (for
        calls the test holds open until it releases them)."""
        if root is None:
            self._count += 1
            root = self.root / f"gw-{self._count}"
        mcp: dict[str, Any] = {"url": f"{self.upstream.url}/mcp"}
        if call_timeout is not None:
            mcp["timeout"] = call_timeout
            overrides.setdefault("limits", {"call_timeout": call_timeout})
        approvals = {"public_url": PUBLIC_URL, **overrides.pop("approvals", {})}
        config = self.configs.base({"name": "ops", "mcp": mcp}, auth={"api_keys": api_keys()}, approvals=approvals,
                                   **overrides)
        path: Path = self.configs.write(root, config, {"approvals.yaml": policy_text})
        return path

    def gateway(self, config_file: Path) -> contextlib.AbstractAsyncContextManager[Any]:
        """``async with bench.gateway(path) as gw``: a gateway the test stops itself (to restart it)."""
        cm: contextlib.AbstractAsyncContextManager[Any] = self.configs.run(config_file)
        return cm

    async def start(self, policy_text: str, **overrides: Any) -> Any:
        """A gateway with this policy (and gateway.yaml ``overrides``), stopped when the test ends."""
        return await self.stack.enter_async_context(self.gateway(self.write(policy_text, **overrides)))

    # clients

    def rest(self, gw: Any, who: str) -> httpx2.AsyncClient:
        """An httpx2 client for ``gw`` with ``who``'s key (one per gateway and person)."""
        key = (gw.url, who)
        if key not in self._rest:
            # a long read: some tests hold a call open until they release it, however slow the machine
            client = httpx2.AsyncClient(base_url=gw.url, headers=auth_header(who), timeout=httpx2.Timeout(30, read=300))
            self._rest[key] = client
            self.stack.push_async_callback(client.aclose)
        return self._rest[key]

    @contextlib.asynccontextmanager
    async def mcp(self, gw: Any, who: str = "alice", elicit: ElicitationFnT | None = None) -> AsyncIterator[Client]:
        """An MCP client (legacy mode) as ``who``; ``elicit`` given = the client declares elicitation."""
        http = httpx2.AsyncClient(headers=auth_header(who), timeout=httpx2.Timeout(30, read=300))
        async with http, Client(streamable_http_client(gw.mcp_url, http_client=http), mode="legacy",
                                elicitation_callback=elicit) as client:
            yield client

    async def invoke(self, gw: Any, tool: str, arguments: Json, *, call_id: str, who: str = "alice",
                     wait: str | None = None) -> httpx2.Response:
        """POST /v1/tools/{tool}/invoke[?wait=...]."""
        params = {"wait": wait} if wait is not None else None
        return await self.rest(gw, who).post(f"/v1/tools/{tool}/invoke", params=params,
                                             json={"arguments": arguments, "call_id": call_id})

    # the approver API

    async def decide(self, gw: Any, who: str, approval_id: str, approve: bool = True,
                     comment: str = "", **edit: Any) -> httpx2.Response:
        """POST /v1/approvals/{id}/decision as ``who`` (``arguments=``: approved with the arguments edited)."""
        return await self.rest(gw, who).post(f"/v1/approvals/{approval_id}/decision",
                                             json={"approve": approve, "comment": comment, **edit})

    async def approval(self, gw: Any, approval_id: str, who: str = "dave") -> Json:
        """GET /v1/approvals/{id}."""
        response = await self.rest(gw, who).get(f"/v1/approvals/{approval_id}")
        assert response.status_code == 200, response.text
        body: Json = response.json()
        return body

    async def pending(self, gw: Any, who: str = "dave") -> list[Json]:
        """GET /v1/approvals?state=pending."""
        response = await self.rest(gw, who).get("/v1/approvals", params={"state": "pending"})
        assert response.status_code == 200, response.text
        found: list[Json] = response.json()["approvals"]
        return found

    async def wait_pending(self, gw: Any, call_id: str) -> Json:
        """The pending approval of ``call_id``, once the held call has created it."""
        deadline = time.monotonic() + STEP_SECONDS
        while True:
            found = [a for a in await self.pending(gw) if a["call_id"] == call_id]
            if found:
                assert len(found) == 1, found
                return found[0]
            assert time.monotonic() < deadline, f"no pending approval for call {call_id} within {STEP_SECONDS}s"
            await asyncio.sleep(0.02)


class Progress:
    """A progress callback that keeps the messages; ``await progress.first()`` waits for one."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._arrived = asyncio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.messages.append(message or "")
        self._arrived.set()

    async def first(self) -> str:
        """The first message (the gateway sends one as soon as it holds the call)."""
        await asyncio.wait_for(self._arrived.wait(), STEP_SECONDS)
        return self.messages[0]


def call_meta(call_id: str) -> Json:
    """The MCP request `_meta` that names the call (so a retry is the same call)."""
    return {"gateway/call_id": call_id}


@contextlib.asynccontextmanager
async def in_background(coro: Coroutine[Any, Any, Any]) -> AsyncIterator[asyncio.Task[Any]]:
    """Run ``coro`` as a task (a held call) while the test decides; cancelled if the test leaves early."""
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def finished(task: asyncio.Task[Any]) -> Any:
    """The task's result, failing the test if it takes longer than a step."""
    return await asyncio.wait_for(asyncio.shield(task), STEP_SECONDS)


def text_of(result: types.CallToolResult) -> str:
    """The text blocks of an MCP result, joined."""
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def serve_gateway(root: Path, upstream: CountingUpstream, stack: contextlib.AsyncExitStack, policy_text: str,
                        *, startup: float, **config: Any) -> str:
    """A gateway (its own folder under ``root``) in front of ``upstream`` with this policy and the people's keys,
    served on loopback until ``stack`` closes; returns its base URL. ``config`` adds or replaces top-level keys."""
    folder = root / f"gw-{len(list(root.glob('gw-*')))}"
    (folder / "policies").mkdir(parents=True)
    (folder / "policies" / "policy.yaml").write_text(policy_text, encoding="utf-8")
    spec = {"policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"},
            "audit": {"file": "data/audit.jsonl"}, "auth": {"api_keys": api_keys()},
            "approvals": {"public_url": PUBLIC_URL},
            "upstreams": [{"name": "ops", "mcp": {"url": f"{upstream.url}/mcp"}}], **config}
    (folder / "gateway.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    app = build_app(load_config(folder / "gateway.yaml"))
    return await stack.enter_async_context(serve_app(app, startup=startup, grace=1))
