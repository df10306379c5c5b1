"""An MCP upstream, over streamable HTTP or a stdio subprocess, through the SDK's client.

The SDK's client lives inside anyio task groups that must be entered and left by one task, so a
dedicated owner task holds the session open until ``close``; calls from any task go through it.
A dead connection is reopened on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT

from gateway.core.errors import UpstreamDown, UpstreamError, UpstreamNotReached
from gateway.core.limits import MAX_RESPONSE_BYTES, UPSTREAM_CHECK_TIMEOUT_SECONDS
from gateway.upstreams.base import ToolProgress, ToolResult, UpstreamTool, resolve_command
from gateway.upstreams.client_requests import ClientRequestRouter, ClientRequestRules
from gateway.upstreams.credentials import BearerAuth, UpstreamCredentials, scrubbed
from gateway.upstreams.environment import child_environment
from gateway.upstreams.http_transport import lean_transport
from gateway.upstreams.keepalive import DrainOnClose
from gateway.upstreams.links import expose_links
from gateway.upstreams.mcp.eras import connect, follow_tool_changes, is_modern
from gateway.upstreams.mcp.lean import LeanCalls, SessionSeen
from gateway.upstreams.mcp.resources import McpItems
from gateway.upstreams.mcp.tasks import TasksExtension, call_as_task, execution_at, needs_task

__all__ = ["McpUpstream"]

log = logging.getLogger("gateway.upstreams.mcp")

# How long connecting (launching the subprocess, the handshake, the first tools/list) may take.
CONNECT_TIMEOUT_SECONDS = 30.0
CLOSE_SECONDS = 5.0  # for the connection's own exit (a stdio server is given time to stop), then a cancel
CANCEL_SECONDS = 2.0  # for the connection to unwind after that cancel
# httpx2's own default pool for an MCP upstream's connection (calls, the standalone and listen streams).
_MCP_CONNECTIONS = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)


async def _stop_owner(name: str, owner: asyncio.Task[None], connected: bool) -> None:
    """Let the connection's owner leave on its own (``_stop`` is set), then cancel it; a close never hangs.

    An owner still connecting is cancelled at once: it would not see ``_stop`` before its connect ends.
    ``asyncio.wait`` is used, not ``await owner`` under a timeout, so that an owner that takes the cancel
    as its own (inside the SDK's task groups) cannot keep the closer waiting with it."""
    done, _ = await asyncio.wait({owner}, timeout=CLOSE_SECONDS if connected else 0)
    if not done:
        owner.cancel()
        done, _ = await asyncio.wait({owner}, timeout=CANCEL_SECONDS)
    if not done:
        log.warning("upstream %s: its connection did not close within %.0fs; left behind", name,
                    CLOSE_SECONDS + CANCEL_SECONDS)


class McpUpstream:
    """Tools discovered from an MCP server and refreshed on ``tools/list_changed``."""

    def __init__(self, name: str, *, url: str | None = None, headers: Mapping[str, str] | None = None,
                 command: str | None = None, args: list[str] | None = None,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 env_passthrough: Iterable[str] = (), max_response_bytes: int = MAX_RESPONSE_BYTES,
                 protocol: str = "auto", client_requests: ClientRequestRules | None = None,
                 fast_calls: bool = True, credentials: UpstreamCredentials | None = None) -> None:
        self.name = name
        self.protocol = protocol  # which MCP era to speak (eras.PROTOCOLS)
        # Sampling, elicitation and roots requests, and log messages, go to the client of the call in flight.
        self._router = ClientRequestRouter(name, client_requests or ClientRequestRules())
        self.max_response_bytes = max_response_bytes
        self._url = url
        self._headers = dict(headers or {})
        # The gateway's own token (config ``auth: client_credentials``) on every request of the shared connection.
        self.credentials = credentials
        # The SDK merges its own few defaults (PATH, HOME, USER, ...) under ``env``; those are all in
        # the minimal base, so the server gets exactly ``child_environment``, never the gateway's.
        self._stdio = StdioServerParameters(command=resolve_command(command), args=list(args or []),
                                            env=child_environment(env or {}, env_passthrough),
                                            cwd=cwd) if command else None
        self._client: Client | None = None
        # Over HTTP, a call whose caller can be sent nothing but its result skips the SDK's client (lean.py).
        self.fast_calls = fast_calls
        self.lean: LeanCalls | None = None
        self.lean_calls = 0  # calls sent on the lean path, over every connection (tests and diagnostics read it)
        self._tools: list[UpstreamTool] = []
        self._listeners: list[Callable[[], None]] = []
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._connect_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self.items = McpItems(name, self.connected_client, self._drop, max_response_bytes)  # resources and prompts

    def tools(self) -> list[UpstreamTool]:
        return list(self._tools)

    @property
    def protocol_version(self) -> str | None:
        """The MCP version spoken on the open connection (None when not connected)."""
        return self._client.protocol_version if self._client is not None else None

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    @property
    def needs_caller_token(self) -> bool:
        """Whether its credential is made from the caller's token (token exchange): no use to a caller without one."""
        return self.credentials is not None and self.credentials.needs_caller_token

    async def start(self) -> None:
        async with self._connect_lock:
            if self._client is not None:
                return
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # Read even when nobody waits any more (the start was cancelled): no "never retrieved" warning.
            ready.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._stop = asyncio.Event()
            self._owner = asyncio.create_task(self._own(ready), name=f"mcp-upstream-{self.name}")
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                    await asyncio.shield(ready)
            except TimeoutError:
                await self.close()
                raise UpstreamDown(f"{self.name}: no answer within {CONNECT_TIMEOUT_SECONDS}s",
                                   "no answer in time") from None

    async def _own(self, ready: asyncio.Future[None]) -> None:
        client: Client | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport: Callable[[], Any]  # a fresh one per connection attempt (each is entered once)
                if self._stdio is not None:
                    transport = functools.partial(StdioServerParameters.model_copy, self._stdio)
                else:
                    assert self._url is not None
                    # With fast calls, plain-http requests ride the lean keep-alive transport (http_transport.py),
                    # the SDK client's own requests too: httpcore's pool scan was a fifth of a call's CPU.
                    fast_wire = lean_transport(_MCP_CONNECTIONS) if self.fast_calls else None
                    wire = fast_wire or httpx2.AsyncHTTPTransport()
                    seen = SessionSeen(_CappedTransport(wire, self.max_response_bytes))
                    auth = BearerAuth(self.credentials) if self.credentials is not None else None
                    http = await stack.enter_async_context(httpx2.AsyncClient(
                        headers=self._headers, timeout=httpx2.Timeout(30, read=300), transport=seen, auth=auth))
                    transport = functools.partial(streamable_http_client, self._url, http_client=http,
                                                  max_sse_event_size=self.max_response_bytes)
                client = await connect(stack, transport, self.protocol, self.name, self._on_message,
                                       extensions=[TasksExtension()], **self._router.client_options())
                self._client = client
                self._router.inside_calls_only = is_modern(client)
                if self.fast_calls and self._url is not None:
                    self.lean = LeanCalls(self._url, http, client, seen, self._router, self.max_response_bytes)
                self._tools = await self._fetch_tools(client)
                await self.items.fetch(client)
                await follow_tool_changes(stack, client, self.name, self._refresh, self.items.refresh)
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # an ExceptionGroup from the SDK's task groups, or a launch failure
            if not ready.done():
                launched = f" (command: {self._stdio.command})" if self._stdio is not None else ""
                ready.set_exception(UpstreamDown(f"{self.name}: cannot connect: {_describe(exc)}{launched}",
                                                 "cannot connect"))
            else:
                log.warning("upstream %s disconnected: %s", self.name, _describe(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._client is client:  # a newer connection may have replaced this one already
                self._client = None
                self.lean = None

    async def close(self) -> None:
        self._stop.set()
        owner, self._owner = self._owner, None
        if owner is not None:
            await _stop_owner(self.name, owner, connected=self._client is not None)
        for task in list(self._background):
            task.cancel()
        self.items.close()
        if self.credentials is not None:
            await self.credentials.aclose()

    async def connected_client(self) -> Client:
        """The live session, reconnecting after a crash; ``UpstreamNotReached`` when there is none."""
        if self._client is None:
            try:
                await self.start()
            except UpstreamError as exc:  # no session, so nothing was sent
                raise UpstreamNotReached(str(exc)) from exc
        client = self._client
        if client is None:
            raise UpstreamNotReached(f"{self.name}: not connected")
        return client

    async def check(self) -> None:
        """A tools/list through the session (``ping`` is gone from MCP 2026-07-28); a connection that fails
        it is dropped, for the supervisor to reopen. A changed list is taken up as a list_changed would be."""
        client = self._client
        if client is None:
            raise UpstreamDown(f"{self.name}: not connected", "not connected")
        try:
            async with asyncio.timeout(UPSTREAM_CHECK_TIMEOUT_SECONDS):
                tools = await self._fetch_tools(client)
        except Exception as exc:  # a closed stdio pipe, a refused HTTP connection, no answer
            await self._drop(client)
            raise UpstreamDown(f"{self.name}: tools/list failed: {_describe(exc)}", "lost connection") from exc
        if tools != self._tools:
            self._tools = tools
            for listener in self._listeners:
                listener()

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float,
                   progress: ToolProgress | None = None) -> ToolResult:
        if self._client is None:
            try:
                await self.start()  # reconnect after a crash
            except UpstreamError as exc:  # no session, so the call was never written
                raise UpstreamNotReached(str(exc)) from exc
        client = self._client
        if client is None:
            raise UpstreamNotReached(f"{self.name}: not connected")
        # A token to be had, or the call fails here, cleanly, with nothing sent (the requests then find it cached).
        authorization = await self.credentials.authorization() if self.credentials is not None else ""
        try:
            with self._router.running():
                async with asyncio.timeout(timeout):
                    if self._task_only(tool):  # a task-only tool: the gateway drives the upstream task (tasks.py)
                        result = await call_as_task(client.session, tool, arguments, timeout)
                    else:
                        result = await self._call_tool(client, tool, arguments, progress)
        except TimeoutError:
            raise UpstreamError(f"{self.name}: {tool} timed out after {timeout}s") from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                await self._drop(client)
            raise UpstreamError(f"{self.name}: {tool}: MCP error {exc.code}: {exc}") from exc
        except Exception as exc:  # the transport failed: the connection cannot be trusted any more
            await self._drop(client)
            raise UpstreamError(f"{self.name}: {tool}: {_describe(exc)}") from exc
        # Over stdio the SDK has already read the whole line; still, what is too big is not kept,
        # audited, stored for approvals or relayed.
        dumped = result.model_dump_json(by_alias=True, exclude_none=True)
        if len(dumped) > self.max_response_bytes:
            raise UpstreamError(f"{self.name}: {tool}: response too large: {len(dumped)} bytes, the limit is "
                                f"{self.max_response_bytes}")
        content = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
        content = expose_links(self.name, content)  # resource URIs as clients read them through the gateway
        structured, token = result.structured_content, authorization.partition(" ")[2]
        if token and token in dumped:  # a tool that echoes its token (a debug tool) does not hand it on
            content, structured = scrubbed(content, token), scrubbed(structured, token)
        return ToolResult(content, structured, bool(result.is_error))

    async def _call_tool(self, client: Client, tool: str, arguments: dict[str, Any],
                         progress: ToolProgress | None) -> types.CallToolResult:
        """The lean path (lean.py) when the call qualifies and the upstream runs it there, else the SDK's."""
        lean = self.lean
        if progress is None and lean is not None and lean.client is client and lean.takes(self._execution(tool)):
            self.lean_calls += 1
            result = await lean.call(tool, arguments)
            if result is not None:
                return result
        return await client.call_tool(tool, arguments, progress_callback=_relay(progress), meta=self._call_meta(client))

    def _call_meta(self, client: Client) -> types.RequestParamsMeta | None:
        """At 2026-07-28, the caller's log level (a server sends log messages only for requests that ask)."""
        level = self._router.log_level() if is_modern(client) else None
        return cast(types.RequestParamsMeta, {types.LOG_LEVEL_META_KEY: level}) if level is not None else None

    def _execution(self, tool: str) -> dict[str, Any] | None:
        return next((t.execution for t in self._tools if t.name == tool), None)

    def _task_only(self, tool: str) -> bool:
        return any(t.name == tool and needs_task(t.execution) for t in self._tools)

    async def _drop(self, client: Client) -> None:
        """Close a connection that died (a killed subprocess, say) so the next call opens a new one.

        Without this the owner task would keep holding the dead client and every later call
        would fail with "Connection closed".
        """
        async with self._connect_lock:
            if self._client is client:
                await self.close()

    async def _fetch_tools(self, client: Client) -> list[UpstreamTool]:
        listed = await client.list_tools(cache_mode="refresh")
        rules = self._router.rules
        return [_tool(t, execution_at(client, _execution(t)), rules.needed_by(t.name)) for t in listed.tools]

    async def _on_message(self, message: Any) -> None:
        self.items.on_message(message)
        if isinstance(message, types.ToolListChangedNotification):
            task = asyncio.create_task(self._refresh())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _refresh(self) -> None:
        client = self._client
        if client is None:
            return
        try:
            self._tools = await self._fetch_tools(client)
        except Exception as exc:
            log.warning("upstream %s: tools/list after list_changed failed: %s", self.name, _describe(exc))
            return
        for listener in self._listeners:
            listener()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Cuts a single JSON response at ``limit`` bytes: the SDK reads those whole (SSE events it caps itself).

    The error is an ``httpx2.StreamError``, which the SDK turns into a JSON-RPC error for that one
    request, so the session survives and the call fails with "response too large".
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = DrainOnClose(response.stream)  # closed early by the SDK: keep the connection
        else:
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            declared = response.headers.get("content-length", "")
            response.stream = _CappedStream(response.stream, self._limit, int(declared) if declared.isdigit() else 0)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, declared: int) -> None:
        self._inner = inner
        self._limit = limit
        self._declared = declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared > self._limit:
            raise httpx2.StreamError(f"response too large: {self._declared} bytes declared, the limit is {self._limit}")
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise httpx2.StreamError(f"response too large: more than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _execution(tool: types.Tool) -> dict[str, Any] | None:
    return tool.execution.model_dump(mode="json", by_alias=True, exclude_none=True) if tool.execution else None


def _tool(tool: types.Tool, execution: dict[str, Any] | None, needs_client: frozenset[str]) -> UpstreamTool:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    return UpstreamTool(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema or {"type": "object"}),
        title=tool.title or annotations.get("title"),
        annotations=annotations,
        output_schema=dict(tool.output_schema) if tool.output_schema else None,
        icons=tuple(icon.model_dump(mode="json", by_alias=True, exclude_none=True) for icon in tool.icons or ()),
        execution=execution,
        meta=dict(tool.meta) if tool.meta else None,
        needs_client=needs_client,
    )


def _relay(to: ToolProgress | None) -> ProgressFnT | None:
    """The SDK's progress callback handing each notification to ``to``."""
    if to is None:
        return None
    forward = to

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await forward(progress, total, message)

    return relay


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
