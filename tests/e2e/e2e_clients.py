"""``E2E``: gateways in front of a counting upstream, the approver API, and real MCP clients as their users
run them by default (imported by name; see conftest.py).

    per_call        the MCP SDK opening a new session for each call, as LangChain's MCP adapters do by
                    default (their ``MultiServerMCPClient`` tools); the adapters themselves need ``mcp<2``
                    and cannot be installed beside the SDK 2.x this project uses
    one_session     the SDK's ``Client`` in the 2025-11-25 era: one MCP session for a whole run
    modern          the SDK's ``Client`` in the 2026-07-28 era: no protocol session at all
    inspector       the MCP Inspector CLI from npm (tests/thirdparty.py): one process, one session, one call
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

# approval_support and thirdparty are plain modules beside the other tests, imported by name.
sys.path.insert(0, str(Path(__file__).parent.parent))

from approval_support import CountingUpstream, auth_header, serve_gateway
from thirdparty import inspector_cli

__all__ = ["E2E", "STEP_SECONDS", "Answer", "CountingUpstream"]

Json = dict[str, Any]

STEP_SECONDS = 30.0  # the most one step (a server starting, a client's call, an approval showing up) may take


class Answer:
    """What a client's call got back, read the same way for every client: the text and the gateway's ``_meta``."""

    def __init__(self, text: str, meta: Json, is_error: bool) -> None:
        self.text, self.meta, self.is_error = text, meta, is_error

    @property
    def decision(self) -> str:
        """The gateway's decision (``allow``, ``pending``, ``terminate``, ``terminated``...)."""
        return str(self.meta.get("gateway/decision", ""))

    @classmethod
    def of(cls, result: types.CallToolResult) -> Answer:
        text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
        return cls(text, dict(result.meta or {}), result.is_error)

    @classmethod
    def of_json(cls, data: Json) -> Answer:
        text = "".join(c.get("text", "") for c in data.get("content", []) if c.get("type") == "text")
        return cls(text, dict(data.get("_meta") or {}), bool(data.get("isError")))


class E2E:
    """Gateways in front of the upstream, clients for them and approver calls; closed at the end of a test."""

    def __init__(self, root: Path, upstream: CountingUpstream, stack: contextlib.AsyncExitStack) -> None:
        self.root = root
        self.upstream = upstream
        self.stack = stack
        self.url = ""  # of the last gateway started

    async def start(self, policy_text: str, **config: Any) -> str:
        """A gateway in front of the upstream with this policy; returns its base URL."""
        self.url = await serve_gateway(self.root, self.upstream, self.stack, policy_text, startup=STEP_SECONDS,
                                       **config)
        return self.url

    # the clients

    @contextlib.asynccontextmanager
    async def session(self, mode: str = "legacy", headers: Json | None = None,
                      who: str = "alice") -> AsyncIterator[Client]:
        """The MCP SDK's ``Client`` as ``who``, with its default client info; ``mode`` its era."""
        http = httpx2.AsyncClient(headers={**auth_header(who), **(headers or {})},
                                  timeout=httpx2.Timeout(STEP_SECONDS))
        async with http, Client(streamable_http_client(f"{self.url}/mcp", http_client=http),
                                mode=mode) as client:  # type: ignore[arg-type]
            yield client

    async def per_call(self, tool: str, arguments: Json, headers: Json | None = None) -> Answer:
        """One call in a session of its own (LangChain's MCP adapters' default): open, initialize, call, close."""
        async with self.session("legacy", headers) as client:
            return Answer.of(await client.call_tool(tool, arguments))

    async def inspector(self, tool: str, arguments: dict[str, str], headers: Json | None = None,
                        who: str = "alice") -> Answer:
        """One ``inspector --cli ... --method tools/call`` process, as a person runs it."""
        sent = {**auth_header(who), **(headers or {})}
        command = [*inspector_cli(), f"{self.url}/mcp", "--transport", "http", "--method", "tools/call",
                   "--tool-name", tool, "--tool-arg", *(f"{k}={v}" for k, v in arguments.items()),
                   "--header", *(f"{k}: {v}" for k, v in sent.items())]
        home = self.root / "inspector-home"
        home.mkdir(exist_ok=True)
        env = {**os.environ, "HOME": str(home), "MCP_CATALOG_PATH": str(home / "mcp.json"), "NO_COLOR": "1"}
        process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE, env=env)
        async with asyncio.timeout(STEP_SECONDS):
            out, err = await process.communicate()
        # 5: the tool's result is an error (the result is still printed, its summary goes to stderr)
        assert process.returncode in (0, 5) and out.strip(), \
            f"inspector exited {process.returncode}: {out.decode()[-1000:]} {err.decode()[-2000:]}"
        return Answer.of_json(json.loads(out))

    # the approver API

    async def api(self, method: str, path: str, who: str = "dave", **kwargs: Any) -> httpx2.Response:
        """One request to the gateway's /v1 API as ``who``."""
        async with httpx2.AsyncClient(base_url=self.url, headers=auth_header(who), timeout=STEP_SECONDS) as client:
            return await client.request(method, path, **kwargs)

    async def approvals(self) -> list[Json]:
        """Every approval request."""
        response = await self.api("GET", "/v1/approvals")
        assert response.status_code == 200, response.text
        found: list[Json] = response.json()["approvals"]
        return found

    async def wait_pending(self, tool: str) -> Json:
        """The one pending approval request for ``tool``, once the held call has created it."""
        deadline = time.monotonic() + STEP_SECONDS
        while True:
            found = [a for a in await self.approvals() if a["tool"] == tool and a["state"] == "pending"]
            if found:
                assert len(found) == 1, found
                return found[0]
            assert time.monotonic() < deadline, f"no pending approval for {tool} within {STEP_SECONDS}s"
            await asyncio.sleep(0.02)

    async def approve(self, approval_id: str, who: str = "dave") -> None:
        """Approve through the approver API."""
        response = await self.api("POST", f"/v1/approvals/{approval_id}/decision", who=who,
                                  json={"approve": True, "comment": "ok"})
        assert response.status_code == 200, response.text
