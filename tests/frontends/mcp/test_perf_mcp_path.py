"""The lean tools/call path (issue 12): in the 2026-07-28 era the SDK checks a call's ``Mcp-Param-*``
headers against the tool's input schema, found by a registry lookup for the caller instead of a
whole tools/list per call. The check still runs for a tool the caller sees, and a tool hidden from
the caller stays unknown: no header check, the same refusal as a tool that does not exist.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from gateway_harness import base_config, http_upstream
from mcp_types import HEADER_MISMATCH, INVALID_PARAMS
from raw_mcp import MCP_HEADERS, message_of

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODERN = "2026-07-28"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}
# `q` travels in an Mcp-Param-Query header too; only admins (alice, not bob) may see api_secret_search.
ROUTED = {"type": "object", "properties": {"q": {"type": "string", "x-mcp-header": "Query"}}}
TOOLS = [{"name": "search", "method": "GET", "path": "/search", "input_schema": ROUTED},
         {"name": "secret_search", "method": "GET", "path": "/search", "input_schema": ROUTED}]
ADMINS_ONLY = """
policy: p
rules:
  - {id: admins-only, tools: [api_secret_search], when: '!("admins" in principal.groups)', action: reject, message: No.}
"""


async def _call(gateway: Any, key: str, tool: str, query: str, header: str | None) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {"q": query}, "_meta": ENVELOPE}}
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": tool}
    if header is not None:
        headers["Mcp-Param-Query"] = header
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=httpx2.Timeout(30)) as http:
        return await http.post("/mcp", content=json.dumps(body).encode(), headers=headers)


async def _gateway(start_gateway: Any, http_api: Any) -> Any:
    return await start_gateway(base_config(http_upstream("api", http_api.url, TOOLS)), {"p.yaml": ADMINS_ONLY})


async def test_a_visible_tool_s_param_headers_are_checked_against_its_schema(start_gateway, http_api, keys):
    gateway = await _gateway(start_gateway, http_api)

    served = await _call(gateway, keys["bob"], "api_search", "shoes", "shoes")
    assert served.status_code == 200, served.text
    assert "result" in message_of(served)

    for header in ("boots", None):  # a header that disagrees with the body, and one missing
        refused = await _call(gateway, keys["bob"], "api_search", "shoes", header)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == HEADER_MISMATCH

    # alice may see the admins' tool: its headers are checked too
    refused = await _call(gateway, keys["alice"], "api_secret_search", "shoes", "boots")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == HEADER_MISMATCH


async def test_a_hidden_tool_stays_unknown_whatever_its_headers(start_gateway, http_api, keys):
    gateway = await _gateway(start_gateway, http_api)

    # bob's mismatched header on the tool he may not see is not checked (a 400 would tell him it exists
    # and what it declares): the call is refused by the policy like any call to it
    hidden = await _call(gateway, keys["bob"], "api_secret_search", "shoes", "boots")
    assert hidden.status_code == 200, hidden.text
    result = message_of(hidden)["result"]
    assert result["isError"] is True
    assert result["_meta"]["gateway/decision"] == "reject"

    missing = await _call(gateway, keys["bob"], "api_no_such_tool", "shoes", "boots")
    error = message_of(missing)["error"]
    assert error["code"] == INVALID_PARAMS
    assert "api_no_such_tool" in error["message"]
