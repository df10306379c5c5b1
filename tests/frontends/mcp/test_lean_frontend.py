"""The lean tools/call path (issue 12, gateway/frontends/mcp/lean.py): qualifying calls are answered without
the SDK's server machinery, with the answers the SDK path gives.

Two gateways side by side, the same config but for ``mcp.fast_path``: the frontend's ``lean.taken`` counter
shows the lean path answered the qualifying calls of both eras and none of the others, and the same raw
requests (good, refused, unknown, invalid, hostile) sent to both get the same status and the same JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
import pytest_asyncio
from gateway_harness import KEYS, MAIN_POLICY, base_config, http_upstream, mcp_upstream, run_gateway, write_gateway
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import _streamable_http_modern as sdk_modern
from mcp.shared.exceptions import MCPDeprecationWarning
from raw_mcp import INITIALIZE, MCP_HEADERS, message_of

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODERN = "2026-07-28"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}
ROUTED = {"type": "object", "properties": {"q": {"type": "string", "x-mcp-header": "Query"}}}
TASKS = "io.modelcontextprotocol/tasks"  # the 2026-07-28 tasks extension
TOOLS = [{"name": "search", "method": "GET", "path": "/search", "input_schema": ROUTED}]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pair(tmp_path_factory: pytest.TempPathFactory, http_api: Any) -> AsyncIterator[dict[str, Any]]:
    """Two gateways: the lean path on (the default) and off (``mcp.fast_path: false``)."""
    running: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        for name, overrides in (("on", {}), ("off", {"mcp": {"fast_path": False}})):
            root = tmp_path_factory.mktemp(f"lean-{name}")
            config = base_config(mcp_upstream("up", env={"UPSTREAM_TRACE_TOOL": "1"}),
                                 http_upstream("api", http_api.url, TOOLS),
                                 limits={"call_timeout": 60}, **overrides)
            running[name] = await stack.enter_async_context(
                run_gateway(write_gateway(root, config, {"main.yaml": MAIN_POLICY})))
        yield running


def taken(gateway: Any) -> int:
    lean = gateway.app.state.mcp.lean
    assert lean is not None
    return int(lean.taken)


@contextlib.asynccontextmanager
async def sdk_client(gateway: Any, mode: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's client as alice, in protocol ``mode`` ("legacy" or "2026-07-28")."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEYS['alice']}"}, timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(gateway.mcp_url, http_client=http), mode=mode,  # type: ignore[arg-type]
                            **options) as client:
        yield client


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


# --- the counter: taken for qualifying calls, not for the others ------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_qualifying_calls_of_the_sdk_client_take_the_lean_path(pair, mode):
    gateway = pair["on"]
    async with sdk_client(gateway, mode) as client:
        await client.list_tools()  # a handshake-era session is known to the gateway from its first request
        before = taken(gateway)
        answers = [await client.call_tool("up_echo", {"text": f"lean {i}"},
                                          meta={"gateway/call_id": f"lean-{mode}-{i}"}) for i in range(3)]
        refused = await client.call_tool("up_echo", {"text": "forbidden"})
        failed = await client.call_tool("up_fail", {})
        assert taken(gateway) == before + 5
    assert [text(a) for a in answers] == ["lean 0", "lean 1", "lean 2"]
    assert refused.is_error and text(refused) == "Echoing that word is not allowed."
    assert failed.is_error
    event = gateway.audit_event(f"lean-{mode}-1")  # the call id the client gave reached the pipeline
    assert event["verdict"] == "allow" and event["principal"]["id"] == "alice"
    first = gateway.audit_event(f"lean-{mode}-0")
    assert event["frontend"] == "mcp" and event["session"] == first["session"]  # one run for the client
    assert event["iteration"] == first["iteration"] + 1  # which counts its calls
    assert pair["off"].app.state.mcp.lean is None


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_lean_call_passes_the_client_s_trace_context_on(pair, mode):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    traceparent = f"00-{trace_id}-00f067aa0ba902b7-01"
    gateway = pair["on"]
    async with sdk_client(gateway, mode) as client:
        await client.list_tools()
        before = taken(gateway)
        result = await client.call_tool("up_trace_context", {}, meta={"traceparent": traceparent})
        assert taken(gateway) == before + 1
    seen = result.structured_content or json.loads(text(result))
    assert seen["traceparent"].split("-")[1] == trace_id


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_calls_that_can_carry_more_than_their_result_go_to_the_sdk(pair, mode):
    gateway = pair["on"]
    heard: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    async def on_elicit(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with sdk_client(gateway, mode) as client:
        await client.list_tools()
        before = taken(gateway)
        stepped = await client.call_tool("up_steps", {"count": 2}, progress_callback=on_progress)
        assert taken(gateway) == before and text(stepped) == "done in 2 steps" and heard == [1, 2]
        listed = await client.list_tools()  # not a call
        assert taken(gateway) == before and listed.tools
    async with sdk_client(gateway, mode, elicitation_callback=on_elicit) as asking:
        await asking.list_tools()
        before = taken(gateway)
        assert text(await asking.call_tool("up_echo", {"text": "may be asked"})) == "may be asked"
        assert taken(gateway) == before
    async with sdk_client(gateway, mode, logging_callback=lambda params: asyncio.sleep(0)) as logged:
        await logged.list_tools()
        meta = None
        if mode == "legacy":  # a level set on the session
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await logged.set_logging_level("debug")
        else:  # a level asked for in the request's _meta
            meta = {"io.modelcontextprotocol/logLevel": "debug"}
        before = taken(gateway)
        assert text(await logged.call_tool("up_echo", {"text": "logged"}, meta=meta)) == "logged"
        assert taken(gateway) == before


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_lean_call_is_cancelled_as_an_sdk_one_is(pair, mode, tmp_path, until):
    gateway = pair["on"]
    marker = tmp_path / f"linger-{mode}"

    async def says(word: str) -> bool:
        return marker.exists() and marker.read_text() == word

    async with sdk_client(gateway, mode) as client:
        await client.list_tools()
        before = taken(gateway)
        call = asyncio.ensure_future(client.call_tool("up_linger", {"marker": str(marker)}))
        assert await until(lambda: says("started"), timeout=20)
        assert taken(gateway) == before + 1
        call.cancel()  # handshake era: notifications/cancelled; 2026-07-28: the client closes the request
        with contextlib.suppress(asyncio.CancelledError):
            await call
        assert await until(lambda: says("cancelled"), timeout=5)
        # the session goes on
        assert text(await client.call_tool("up_echo", {"text": "after"})) == "after"


# --- the differential test: the same raw requests, the lean path on and off ----------------------------------


def call_body(name: str, arguments: Any, meta: dict[str, Any] | None = None, rpc_id: Any = 5) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}).encode()


PER_CALL = ("gateway/call_id", "call_id", "taskId", "createdAt", "lastUpdatedAt")


def normalised(value: Any) -> Any:
    """The JSON with the fields that are per call (call ids, a run's id) blanked."""
    if isinstance(value, dict):
        return {k: "<per call>" if k in PER_CALL else normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def answer(response: httpx2.Response) -> tuple[int, str, Any]:
    kind = response.headers.get("content-type", "").split(";")[0]
    try:
        body: Any = normalised(message_of(response))
    except (ValueError, StopIteration):
        body = response.text
    return response.status_code, kind, body


@contextlib.asynccontextmanager
async def legacy_session(gateway: Any, who: str = "alice") -> AsyncIterator[tuple[httpx2.AsyncClient, str]]:
    """A handshake-era session opened by hand (no capabilities), known to the gateway (one tools/list)."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {KEYS[who]}"}
    async with httpx2.AsyncClient(base_url=gateway.url, headers=headers, timeout=httpx2.Timeout(30)) as http:
        opened = await http.post("/mcp", json=INITIALIZE)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        sid = {"Mcp-Session-Id": session}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=sid)
        listed = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=sid)
        assert listed.status_code == 200, listed.text
        yield http, session
        await http.delete("/mcp", headers=sid)


LEGACY_CASES: dict[str, tuple[bytes, dict[str, str], bool]] = {
    # name: (body, headers beyond the session's, answered by the lean path)
    "success": (call_body("up_echo", {"text": "same"}, {"gateway/call_id": "d-1"}), {}, True),
    "string id": (call_body("up_echo", {"text": "same"}, rpc_id="x-1"), {}, True),
    "is error": (call_body("up_fail", {}), {}, True),
    "refused by policy": (call_body("up_echo", {"text": "forbidden"}), {}, True),
    "skipped by policy": (call_body("up_echo", {"text": "skip me"}), {}, True),
    "unknown tool": (call_body("nope", {}), {}, True),
    "another upstream's tool": (call_body("api_search", {"q": "x"}), {}, True),
    "arguments not an object": (call_body("up_echo", 5), {}, False),
    "no name": (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"arguments": {}}}', {}, False),
    "no jsonrpc": (b'{"id": 5, "method": "tools/call", "params": {"name": "up_echo"}}', {}, False),
    "bool id": (call_body("up_echo", {"text": "x"}, rpc_id=True), {}, False),
    "malformed JSON": (b'{"jsonrpc": "2.0", "id": 5, "method": ', {}, False),
    "a batch": (b"[" + call_body("up_echo", {"text": "x"}) + b"]", {}, False),
    "with a task": (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "up_echo",'
                    b' "arguments": {"text": "t"}, "task": {"ttl": 60000}}}', {}, False),
    "unknown session": (call_body("up_echo", {"text": "x"}), {"Mcp-Session-Id": "0" * 32}, False),
    "bad Accept": (call_body("up_echo", {"text": "x"}), {"Accept": "text/html"}, False),
    "JSON-only Accept": (call_body("up_echo", {"text": "json only"}), {"Accept": "application/json"}, True),
    "unknown protocol version": (call_body("up_echo", {"text": "x"}), {"MCP-Protocol-Version": "1999-01-01"}, False),
}


async def test_the_same_handshake_era_requests_get_the_same_answers(pair):
    answers: dict[str, dict[str, Any]] = {}
    for name, gateway in pair.items():
        counted = taken(pair["on"])
        async with legacy_session(gateway) as (http, session), legacy_session(gateway, "bob") as (bob, bobs):
            got: dict[str, Any] = {}
            for case, (body, headers, lean) in LEGACY_CASES.items():
                response = await http.post("/mcp", content=body, headers={"Mcp-Session-Id": session, **headers})
                got[case] = answer(response)
                if name == "on":
                    assert taken(gateway) == counted + lean, case
                    counted = taken(gateway)
                if response.status_code == 200 and "Mcp-Session-Id" not in headers:
                    assert response.headers["mcp-session-id"] == session, case
            # another principal's session id: as if it did not exist
            got["another principal's session"] = answer(await http.post(
                "/mcp", content=call_body("up_echo", {"text": "x"}), headers={"Mcp-Session-Id": bobs}))
            assert taken(pair["on"]) == counted
            # a tool refused to bob (secrets are for admins), in his own session
            got["refused to this principal"] = answer(await bob.post("/mcp", content=call_body("up_secret", {}),
                                                       headers={"Mcp-Session-Id": bobs}))
            assert taken(pair["on"]) == counted + (name == "on")
        answers[name] = got
    assert answers["on"] == answers["off"]
    on = answers["on"]
    assert on["success"][:2] == (200, "application/json")
    assert on["success"][2]["result"]["content"][0]["text"] == "same"
    assert on["unknown tool"][2]["error"]["code"] == types.INVALID_PARAMS
    assert "nope" in on["unknown tool"][2]["error"]["message"]
    refused = on["refused to this principal"][2]["result"]
    assert refused["isError"] and refused["content"][0]["text"] == "Only admins may read secrets."
    assert on["unknown session"][0] == 404 and on["another principal's session"] == on["unknown session"]
    assert on["bad Accept"][0] == 406 and on["malformed JSON"][0] == 400


def modern_headers(name: str | None, **extra: str) -> dict[str, str]:
    headers = {**MCP_HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", **extra}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


MODERN_CASES: dict[str, tuple[bytes, dict[str, str], bool]] = {
    "success": (call_body("up_echo", {"text": "same"}, {**ENVELOPE, "gateway/call_id": "m-1"}),
                modern_headers("up_echo"), True),
    "is error": (call_body("up_fail", {}, ENVELOPE), modern_headers("up_fail"), True),
    "refused by policy": (call_body("up_echo", {"text": "forbidden"}, ENVELOPE), modern_headers("up_echo"), True),
    "unknown tool": (call_body("nope", {}, ENVELOPE), modern_headers("nope"), True),
    "param header agrees": (call_body("api_search", {"q": "shoes"}, ENVELOPE),
                            modern_headers("api_search", **{"Mcp-Param-Query": "shoes"}), True),
    "param header disagrees": (call_body("api_search", {"q": "shoes"}, ENVELOPE),
                               modern_headers("api_search", **{"Mcp-Param-Query": "boots"}), False),
    "param header missing": (call_body("api_search", {"q": "shoes"}, ENVELOPE), modern_headers("api_search"), False),
    "wrong Mcp-Name": (call_body("up_echo", {"text": "x"}, ENVELOPE), modern_headers("up_add"), False),
    "no Mcp-Name": (call_body("up_echo", {"text": "x"}, ENVELOPE), modern_headers(None), False),
    "no envelope": (call_body("up_echo", {"text": "x"}), modern_headers("up_echo"), False),
    "arguments not an object": (call_body("up_echo", 5, ENVELOPE), modern_headers("up_echo"), False),
    "malformed JSON": (b'{"jsonrpc": "2.0", "id": 5, "method": ', modern_headers("up_echo"), False),
    "bad Accept": (call_body("up_echo", {"text": "x"}, ENVELOPE), modern_headers("up_echo", Accept="text/html"),
                   False),
    "JSON-only Accept": (call_body("up_echo", {"text": "x"}, ENVELOPE),
                         modern_headers("up_echo", Accept="application/json"), False),
    "log level": (call_body("up_echo", {"text": "x"}, {**ENVELOPE, "io.modelcontextprotocol/logLevel": "debug"}),
                  modern_headers("up_echo"), False),
    "input responses": (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "up_echo",'
                        b' "arguments": {"text": "x"}, "inputResponses": {}, "_meta": '
                        + json.dumps(ENVELOPE).encode() + b"}}", modern_headers("up_echo"), False),
    "request state": (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "up_echo",'
                      b' "arguments": {"text": "x"}, "requestState": "made-up", "_meta": '
                      + json.dumps(ENVELOPE).encode() + b"}}", modern_headers("up_echo"), False),
    "task-aware client": (call_body("up_echo", {"text": "x"}, {
        **ENVELOPE, "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}),
        modern_headers("up_echo"), False),
    "asking client": (call_body("up_echo", {"text": "x"}, {
        **ENVELOPE, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}), modern_headers("up_echo"),
        False),
}


async def test_the_same_2026_07_28_requests_get_the_same_answers(pair):
    answers: dict[str, dict[str, Any]] = {}
    for name, gateway in pair.items():
        counted = taken(pair["on"])
        got: dict[str, Any] = {}
        auth = {"Authorization": f"Bearer {KEYS['alice']}"}
        async with httpx2.AsyncClient(base_url=gateway.url, headers=auth, timeout=httpx2.Timeout(30)) as http:
            for case, (body, headers, lean) in MODERN_CASES.items():
                response = await http.post("/mcp", content=body, headers=headers)
                got[case] = answer(response)
                assert "mcp-session-id" not in response.headers, case
                if name == "on":
                    assert taken(gateway) == counted + lean, case
                    counted = taken(gateway)
        answers[name] = got
    assert answers["on"] == answers["off"]
    on = answers["on"]
    assert on["success"][:2] == (200, "application/json")
    result = on["success"][2]["result"]
    assert result["content"][0]["text"] == "same" and result["resultType"] == "complete"
    assert on["unknown tool"][0] == 400 and on["unknown tool"][2]["error"]["code"] == types.INVALID_PARAMS
    assert on["param header disagrees"][0] == 400
    assert on["param header disagrees"][2]["error"]["code"] == types.HEADER_MISMATCH
    assert on["wrong Mcp-Name"][0] == 400 and on["malformed JSON"][0] == 400 and on["bad Accept"][0] == 406


async def test_a_slow_2026_07_28_call_is_streamed_as_the_sdk_streams_it(pair, monkeypatch):
    # The SDK's deferral window, shortened (both paths read it per call): past it, an event stream with pings.
    monkeypatch.setattr(sdk_modern, "_SSE_PING_INTERVAL", 0.3)
    got: dict[str, tuple[int, str, Any, str]] = {}
    for name, gateway in pair.items():
        before = taken(pair["on"])
        auth = {"Authorization": f"Bearer {KEYS['alice']}"}
        async with httpx2.AsyncClient(base_url=gateway.url, headers=auth, timeout=httpx2.Timeout(30)) as http:
            response = await http.post("/mcp", content=call_body("up_slow", {"seconds": 1}, ENVELOPE),
                                       headers=modern_headers("up_slow"))
        status, kind, body = answer(response)
        got[name] = (status, kind, body, response.text.split("\r\n")[0])
        assert taken(pair["on"]) == before + (name == "on")
    assert got["on"] == got["off"]
    assert got["on"][:2] == (200, "text/event-stream") and got["on"][3] == ": ping"
    assert got["on"][2]["result"]["content"][0]["text"]


async def test_a_session_deleted_during_a_lean_call_ends_it_as_the_sdk_does(pair, tmp_path, until):
    answers = {}
    for name, gateway in pair.items():
        marker = tmp_path / f"deleted-{name}"

        async def says(word: str, marker: Any = marker) -> bool:
            return marker.exists() and marker.read_text() == word

        async with legacy_session(gateway) as (http, session):
            before = taken(pair["on"])
            call = asyncio.ensure_future(http.post("/mcp", content=call_body("up_linger", {"marker": str(marker)}),
                                                   headers={"Mcp-Session-Id": session}))
            assert await until(lambda: says("started"), timeout=20)
            assert taken(pair["on"]) == before + (name == "on")
            deleted = await http.delete("/mcp", headers={"Mcp-Session-Id": session})
            assert deleted.status_code == 200
            answers[name] = answer(await call)
            assert await until(lambda: says("cancelled"), timeout=5)
    assert answers["on"] == answers["off"]
    assert answers["on"][0] == 500


async def test_a_server_middleware_the_lean_path_does_not_know_sends_every_call_to_the_sdk(pair):
    gateway = pair["on"]
    seen: list[str] = []

    async def watching(ctx: Any, call_next: Any) -> Any:  # a middleware only the SDK path would run
        seen.append(ctx.method)
        return await call_next(ctx)

    middleware = gateway.app.state.mcp.server.middleware
    middleware.append(watching)
    try:
        for mode in ("legacy", MODERN):
            async with sdk_client(gateway, mode) as client:
                await client.list_tools()
                before = taken(gateway)
                assert text(await client.call_tool("up_echo", {"text": "watched"})) == "watched"
                assert taken(gateway) == before, mode
    finally:
        middleware.remove(watching)
    assert seen.count("tools/call") == 2
