"""The contract of gateway/upstreams/mcp/_sdk.py with the MCP SDK: each private name it relies on, pinned.

Every function of ``_sdk.py`` is exercised here the way ``lean.py`` and ``tasks.py`` use it, against a real SDK
``Client`` entered on a real in-process ``MCPServer`` in both eras (the handshake over the SDK's JSON-RPC
streams, 2026-07-28 over its direct dispatcher). An SDK upgrade that renames, removes or reshapes one fails
here with a message naming the ``_sdk.py`` function to fix; the last test keeps every other module under
``gateway/upstreams`` off the SDK's private names.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags
from pydantic import BaseModel

from gateway.upstreams.mcp import _sdk
from gateway.upstreams.mcp.tasks import TasksExtension

HANDSHAKE, MODERN = "legacy", "2026-07-28"
GATEWAY = Path(__file__).resolve().parents[3] / "gateway"


@contextlib.contextmanager
def relied_on(name: str) -> Iterator[None]:
    """Any failure inside is reported as the ``_sdk.py`` function whose reliance on the SDK broke."""
    assert hasattr(_sdk, name), f"gateway/upstreams/mcp/_sdk.py has no {name}"
    try:
        yield
    except Exception as exc:
        pytest.fail(f"gateway/upstreams/mcp/_sdk.py: {name} no longer holds with mcp {version('mcp')}: "
                    f"{type(exc).__name__}: {exc}")


class Reply(BaseModel):
    text: str


def _question(who: str) -> Elicit[Reply]:
    return Elicit(f"a question for {who}", Reply)


def _server() -> MCPServer:
    server = MCPServer("sdk-contract", version="0.1.0")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    @server.tool()
    async def ask(who: str, reply: Annotated[Reply, Resolve(_question)]) -> str:
        """The 2026-07-28 era's question: an InputRequiredResult round."""
        return f"{who} heard: {reply.text}"

    return server


class Seen:
    """What the client's callbacks were handed."""

    def __init__(self) -> None:
        self.elicited: list[tuple[Any, str]] = []  # (request id, message)
        self.logged: list[Any] = []
        self.messages: list[Any] = []

    async def elicit(self, ctx: ClientRequestContext, params: Any) -> types.ElicitResult:
        self.elicited.append((ctx.request_id, params.message))
        return types.ElicitResult(action="accept", content={"text": "yes"})

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logged.append(params)

    async def message(self, message: Any) -> None:
        self.messages.append(message)


@contextlib.asynccontextmanager
async def _client(mode: str, seen: Seen) -> AsyncIterator[Client]:
    async with Client(_server(), mode=mode, elicitation_callback=seen.elicit, logging_callback=seen.log,
                      message_handler=seen.message, extensions=[TasksExtension()], cache=None) as client:
        await client.list_tools()  # as the gateway does on connecting (2026-07-28: the tools' header maps)
        yield client


@pytest.fixture(params=[HANDSHAKE, MODERN])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_session_hooks_stamp_and_send_a_request_as_the_session_does(mode: str) -> None:
    async with _client(mode, Seen()) as client:
        with relied_on("session_hooks"):
            hooks = _sdk.session_hooks(client.session)
            params: dict[str, Any] = {"name": "echo", "arguments": {"text": "hi"}}
            data: dict[str, Any] = {"method": "tools/call", "params": params}
            opts: Any = {}
            hooks.stamp(data, opts)
            headers = opts["headers"]
            assert headers["mcp-protocol-version"] == client.protocol_version
            if mode == MODERN:  # the 2026-07-28 envelope: routing headers and the client's _meta
                assert headers["mcp-method"] == "tools/call" and headers["mcp-name"] == "echo"
                assert params["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN
            raw = await hooks.send_raw_request("tools/call", data.get("params"), opts)
            assert isinstance(raw, dict) and raw["content"][0]["text"] == "hi"


async def test_session_hooks_parse_tool_results_with_the_active_claims(mode: str) -> None:
    async with _client(mode, Seen()) as client:
        with relied_on("session_hooks"):
            adapter = _sdk.session_hooks(client.session).call_tool_adapter
            parsed = adapter.validate_python({"content": [{"type": "text", "text": "x"}]}, by_name=False)
            assert isinstance(parsed, types.CallToolResult) and parsed.content[0].text == "x"  # type: ignore[union-attr]
            if mode == MODERN:  # the tasks extension's claim is folded in at 2026-07-28 (tasks.py relies on it)
                task = adapter.validate_python({"resultType": "task", "taskId": "t-1"}, by_name=False)
                claim = TasksExtension().claims()[0]
                assert type(task) is claim.model and task.task_id == "t-1"  # type: ignore[attr-defined]


async def test_session_hooks_stay_the_sessions_once_it_is_entered(mode: str) -> None:
    """``lean.py`` reads the hooks once per connection: nothing after the handshake may replace them."""
    async with _client(mode, Seen()) as client:
        with relied_on("session_hooks"):
            before = _sdk.session_hooks(client.session)
            await client.call_tool("echo", {"text": "again"})
            await client.list_tools()
            if mode == HANDSHAKE:
                await client.session.initialize()  # a second handshake is answered from the first
            after = _sdk.session_hooks(client.session)
            assert after.stamp is before.stamp
            assert after.call_tool_adapter is before.call_tool_adapter
            assert after.on_request == before.on_request and after.on_notify == before.on_notify
            assert after.send_raw_request == before.send_raw_request


async def test_answer_request_goes_through_the_clients_callbacks() -> None:
    seen = Seen()
    async with _client(HANDSHAKE, seen) as client:
        with relied_on("answer_request"):
            hooks = _sdk.session_hooks(client.session)
            assert await _sdk.answer_request(hooks, "r-1", "ping", None) == {}
            schema = {"type": "object", "properties": {"text": {"type": "string"}}}
            answer = await _sdk.answer_request(hooks, "r-2", "elicitation/create",
                                               {"mode": "form", "message": "sure?", "requestedSchema": schema})
            assert answer == {"action": "accept", "content": {"text": "yes"}}
            assert seen.elicited == [("r-2", "sure?")]  # the request's own id reaches the callback
            with pytest.raises(MCPError) as refused:
                await _sdk.answer_request(hooks, "r-3", "no/such/method", None)
            assert refused.value.code == types.METHOD_NOT_FOUND


async def test_deliver_notification_reaches_the_callbacks_and_the_message_handler() -> None:
    seen = Seen()
    async with _client(HANDSHAKE, seen) as client:
        with relied_on("deliver_notification"):
            hooks = _sdk.session_hooks(client.session)
            await _sdk.deliver_notification(hooks, "notifications/message", {"level": "warning", "data": "careful"})
            await _sdk.deliver_notification(hooks, "notifications/tools/list_changed", None)
            assert [p.data for p in seen.logged] == ["careful"]
            assert any(isinstance(m, types.ToolListChangedNotification) for m in seen.messages)


async def test_drive_input_required_answers_the_questions_and_retries() -> None:
    seen = Seen()
    async with _client(MODERN, seen) as client:
        with relied_on("drive_input_required"):
            session = client.session
            calls: list[Any] = []

            async def retry(responses: Any, state: str | None) -> Any:
                calls.append(responses)
                return await session.call_tool("ask", {"who": "ann"}, input_responses=responses,
                                               request_state=state, allow_input_required=True, allow_claimed=True)

            first = await retry(None, None)
            assert isinstance(first, types.InputRequiredResult)
            final = await _sdk.drive_input_required(client, first, retry)
            assert isinstance(final, types.CallToolResult) and final.content[0].text == "ann heard: yes"  # type: ignore[union-attr]
            assert len(calls) == 2 and calls[1]  # the callbacks' answers went with the retry
            assert [message for _, message in seen.elicited] == ["a question for ann"]
            done = types.CallToolResult(content=[])
            assert await _sdk.drive_input_required(client, done, retry) is done  # a final result passes through
            assert len(calls) == 2


def test_clamp_inbound_ttl_floors_a_negative_ttl_in_place() -> None:
    with relied_on("clamp_inbound_ttl"):
        assert list(inspect.signature(_sdk.clamp_inbound_ttl).parameters) == ["raw"]
        raw: dict[str, Any] = {"ttlMs": -5, "content": []}
        assert _sdk.clamp_inbound_ttl(raw) is None
        assert raw == {"ttlMs": 0, "content": []}
        kept: dict[str, Any] = {"ttlMs": 7}
        _sdk.clamp_inbound_ttl(kept)
        assert kept == {"ttlMs": 7}


def test_later_revision_fields_names_what_a_newer_revision_adds() -> None:
    with relied_on("later_revision_fields"):
        assert list(inspect.signature(_sdk.later_revision_fields).parameters) == ["method", "version"]
        older = _sdk.later_revision_fields("tools/call", "2025-11-25")
        assert isinstance(older, frozenset) and "resultType" in older  # 2026-07-28's, dropped from a 2025 result
        assert _sdk.later_revision_fields("tools/call", KNOWN_PROTOCOL_VERSIONS[-1]) == frozenset()


def test_otel_span_and_inject_trace_context_make_the_sdks_client_span() -> None:
    with relied_on("otel_span"):
        parameters = inspect.signature(_sdk.otel_span).parameters
        assert next(iter(parameters)) == "name" and {"kind", "attributes"} <= set(parameters)
        with _sdk.otel_span("MCP send tools/call echo", kind=SpanKind.CLIENT,
                            attributes={"mcp.method.name": "tools/call"}) as span:
            span.set_attributes({"error.type": "-32602"})
            span.set_status(StatusCode.ERROR, "refused")
    with relied_on("inject_trace_context"):
        context = SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=False, trace_flags=TraceFlags(1))
        meta: dict[str, Any] = {}
        with trace.use_span(NonRecordingSpan(context)):
            assert _sdk.inject_trace_context(meta) is None
        assert meta["traceparent"] == f"00-{0x1234:032x}-{0x5678:016x}-01"


# Private names of another object that are public API in spite of the underscore (namedtuple's methods).
_PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make"})
_LIBRARIES = ("mcp", "mcp_types", "httpx2", "httpcore2")


def _private_uses(path: Path) -> list[str]:
    """Reads of another object's private attribute, and imports of a library's private module or name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    and node.attr not in _PUBLIC_UNDERSCORED:
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for name in modules:
            parts = name.split(".")
            if parts[0] in _LIBRARIES and any(part.startswith("_") for part in parts[1:]):
                found.append(f"{path}:{node.lineno}: import {name}")
    return found


def test_only_the_sdk_modules_touch_private_names_under_upstreams() -> None:
    modules = [p for p in sorted((GATEWAY / "upstreams").rglob("*.py")) if p.name != "_sdk.py"]
    assert len(modules) > 10
    assert [use for path in modules for use in _private_uses(path)] == []


def test_the_scan_sees_a_private_name(tmp_path: Path) -> None:
    """The scan above would catch what it is for (a test that cannot fail is a defect)."""
    sample = tmp_path / "sample.py"
    sample.write_text("from mcp.shared._otel import otel_span\nimport httpx2._utils\nx = session._stamp\n"
                      "y = self._own\nz = shape._replace(a=1)\n")
    assert [use.split(": ", 1)[1] for use in _private_uses(sample)] == [
        "import mcp.shared._otel.otel_span", "import httpx2._utils", "session._stamp"]
