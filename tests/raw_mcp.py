"""JSON-RPC to the gateway's /mcp by hand: for what the SDK client will not send (NaN, deep nesting,
raw bytes, another principal's session id). Imported by name, like approval_support.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2

__all__ = ["INITIALIZE", "MCP_HEADERS", "RawMcp"]

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def message_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, whether sent as JSON or as one SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        found: dict[str, Any] = json.loads(next(d for d in data if d))
        return found
    body: dict[str, Any] = response.json()
    return body


@dataclass
class RawMcp:
    """One MCP session opened by hand with a key."""

    http: httpx2.AsyncClient
    session_id: str

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, url: str, key: str) -> AsyncIterator[RawMcp]:
        """Initialize a session as the key's principal (and close it with DELETE at the end)."""
        async with httpx2.AsyncClient(base_url=url, headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"},
                                      timeout=httpx2.Timeout(30)) as http:
            response = await http.post("/mcp", json=INITIALIZE)
            assert response.status_code == 200, response.text
            session = cls(http, response.headers["mcp-session-id"])
            await session.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
            yield session
            await http.delete("/mcp", headers={"Mcp-Session-Id": session.session_id})

    async def send(self, body: bytes, session_id: str | None = None) -> httpx2.Response:
        """POST raw bytes in this session (or in the one named)."""
        return await self.http.post("/mcp", content=body, headers={"Mcp-Session-Id": session_id or self.session_id})

    async def call_tool(self, name: str, arguments_json: str, call_id: str) -> httpx2.Response:
        """tools/call with the arguments spliced in as raw JSON text (so NaN, 1e400 etc. go as written)."""
        body = ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": ' + json.dumps(name)
                + ', "arguments": ' + arguments_json + ', "_meta": {"gateway/call_id": ' + json.dumps(call_id) + "}}}")
        return await self.send(body.encode())

    async def request(self, method: str, params: dict[str, Any], request_id: int = 7) -> httpx2.Response:
        """One JSON-RPC request in this session, as the SDK client would send it."""
        return await self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                           "params": params}).encode())

    async def answer_about(self, method: str, uri: str) -> tuple[int, str, str]:
        """Status, content type and JSON-RPC message (sorted JSON) of ``method`` on ``uri``, the URI written
        ``<uri>``: what tells two URIs' answers apart, if anything does."""
        response = await self.request(method, {"uri": uri})
        body = json.dumps(message_of(response), sort_keys=True).replace(json.dumps(uri)[1:-1], "<uri>")
        return response.status_code, response.headers.get("content-type", ""), body
