"""Handshake-era tools/calls answered as one JSON body when nothing else can go on their stream
(issue 12, gateway/frontends/mcp/quiet.py), and on an SSE stream whenever something could: a
progress token, a log level set on the session, a client that declared elicitation, sampling or roots.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from raw_mcp import INITIALIZE, MCP_HEADERS, RawMcp, message_of

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

SSE = "text/event-stream"
JSON = "application/json"


@contextlib.asynccontextmanager
async def _session(gateway: Any, key: str, capabilities: dict[str, Any]) -> AsyncIterator[RawMcp]:
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": capabilities}}
    async with httpx2.AsyncClient(base_url=gateway.url, headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"},
                                  timeout=httpx2.Timeout(30)) as http:
        response = await http.post("/mcp", json=initialize)
        assert response.status_code == 200, response.text
        session = RawMcp(http, response.headers["mcp-session-id"])
        await session.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        yield session
        await http.delete("/mcp", headers={"Mcp-Session-Id": session.session_id})


async def _echo(session: RawMcp, text: str, meta: dict[str, Any] | None = None) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "up_echo", "arguments": {"text": text}, "_meta": meta or {}}}
    response = await session.send(json.dumps(body).encode())
    assert response.status_code == 200, response.text
    assert message_of(response)["result"]["content"][0]["text"] == text
    return response


def _kind(response: httpx2.Response) -> str:
    return response.headers["content-type"].split(";")[0]


async def test_a_quiet_session_s_calls_come_back_as_json(shared_gateway, keys):
    async with _session(shared_gateway, keys["alice"], {}) as session:
        await _echo(session, "first")  # the gateway meets the session on its first call
        answer = await _echo(session, "second")
        assert _kind(answer) == JSON
        assert answer.headers["mcp-session-id"] == session.session_id
        # a call that asked for progress streams
        assert _kind(await _echo(session, "progress", {"progressToken": "p1"})) == SSE
        assert _kind(await _echo(session, "again")) == JSON
        # a list is not a call: it streams as before
        listed = await session.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode())
        assert _kind(listed) == SSE


async def test_a_session_that_set_a_log_level_streams_its_calls(shared_gateway, keys):
    async with _session(shared_gateway, keys["alice"], {}) as session:
        await _echo(session, "first")
        assert _kind(await _echo(session, "second")) == JSON
        level = {"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel", "params": {"level": "debug"}}
        assert (await session.send(json.dumps(level).encode())).status_code == 200
        assert _kind(await _echo(session, "third")) == SSE


async def test_a_client_that_can_be_asked_streams_its_calls(shared_gateway, keys):
    for capabilities in ({"elicitation": {}}, {"sampling": {}}, {"roots": {"listChanged": True}}):
        async with _session(shared_gateway, keys["alice"], capabilities) as session:
            await _echo(session, "first")
            assert _kind(await _echo(session, "second")) == SSE, capabilities


async def _sdk_kinds(gateway: Any, key: str, **options: Any) -> list[str]:
    """The SDK client (handshake era) calling up_echo three times: the content types of the calls' answers."""
    kinds: list[str] = []

    async def on_response(response: httpx2.Response) -> None:
        await response.aread()
        if b'"tools/call"' in response.request.content:
            kinds.append(_kind(response))

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30),
                              event_hooks={"response": [on_response]})
    async with http, Client(streamable_http_client(gateway.mcp_url, http_client=http), mode="legacy",
                            **options) as client:
        for text in ("one", "two", "three"):
            result = await client.call_tool("up_echo", {"text": text})
            assert not result.is_error and result.content[0].text == text  # type: ignore[union-attr]
    return kinds


async def test_the_sdk_client_gets_json_unless_it_can_be_asked(shared_gateway, keys):
    assert await _sdk_kinds(shared_gateway, keys["alice"]) == [SSE, JSON, JSON]

    async def elicit(context: Any, params: Any) -> Any:
        raise AssertionError("nothing is asked here")

    assert await _sdk_kinds(shared_gateway, keys["alice"], elicitation_callback=elicit) == [SSE, SSE, SSE]
