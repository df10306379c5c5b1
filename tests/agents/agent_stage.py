"""``Stage``: a fake model, an upstream, gateways in front of it, agent runs and approver calls.

    fake model      tests/agents/fake_model.py: a scripted OpenAI-compatible model
    upstream        ``CountingUpstream`` (tests/approval_support.py): an MCP server over
                    streamable HTTP behind the gateway as ``ops`` (``ops_deploy``, ``ops_slow``, ...);
                    it records every run, so "ran once, with these arguments" is read from the upstream
    the gateway     ``await stage.start(policy)``: gateway.yaml (``PEOPLE``'s keys) and the policy in a
                    tmp dir, ``load_config`` -> ``build_app`` -> uvicorn; stopped after the test
    the agents      ``await stage.run(framework, prompt, run_id=...)``: one agent run of that framework
                    (tests/agents/drivers.py), the gateway as its MCP server, the fake as its model

A scenario is a policy, a script for the fake model (``script(...)``) and assertions on what the model
read, what the upstream ran, and what the approver API shows. Imported by name (not from conftest,
which several folders have).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2

# approval_support lives at the top of tests/; it is a plain module imported by name.
sys.path.insert(0, str(Path(__file__).parent.parent))

from approval_support import CountingUpstream, auth_header, serve_gateway
from drivers import DRIVERS, AgentRun
from fake_model import FakeModel

__all__ = ["RUN_SECONDS", "STEP_SECONDS", "CountingUpstream", "SharedGateways", "Stage"]

Json = dict[str, Any]

STEP_SECONDS = 20.0  # the most one wait (a server starting, an approval showing up) may take
RUN_SECONDS = 30.0  # the most one agent run may take, held calls included


class SharedGateways:
    """Gateways a module's tests share: one per group, policy and config, started on first use and stopped with
    the module. For tests that each use runs of their own and read nothing a neighbour could have added."""

    def __init__(self, root: Path, stack: contextlib.AsyncExitStack) -> None:
        self.root = root
        self.stack = stack
        self._urls: dict[str, str] = {}

    async def url(self, group: str, upstream: CountingUpstream, policy_text: str, config: Json) -> str:
        """The gateway of this group with this policy and config (started now if there is none yet)."""
        key = json.dumps([group, policy_text, config], sort_keys=True)
        if key not in self._urls:
            self._urls[key] = await serve_gateway(self.root, upstream, self.stack, policy_text,
                                                  startup=STEP_SECONDS, **config)
        return self._urls[key]


class Stage:
    """A fake model, an upstream, gateways in front of it and approver calls; closed at the end of a test.

    With ``shared`` (and its ``group``), ``start`` reuses the module's gateway of the same policy and config."""

    def __init__(self, root: Path, model: FakeModel, model_url: str, upstream: CountingUpstream,
                 stack: contextlib.AsyncExitStack, shared: tuple[SharedGateways, str] | None = None) -> None:
        self.root = root
        self.model = model
        self.model_url = model_url
        self.upstream = upstream
        self.stack = stack
        self.shared = shared
        self.url = ""  # of the last gateway started

    async def start(self, policy_text: str, **config: Any) -> str:
        """A gateway in front of the upstream with this policy; returns its base URL."""
        if self.shared is not None:
            gateways, group = self.shared
            self.url = await gateways.url(group, self.upstream, policy_text, config)
        else:
            self.url = await serve_gateway(self.root, self.upstream, self.stack, policy_text, startup=STEP_SECONDS,
                                           **config)
        return self.url

    def headers(self, who: str = "alice", run_id: str | None = None) -> dict[str, str]:
        """The MCP client's headers: the API key, and the run id when given."""
        return {**auth_header(who), **({"X-Gateway-Session": run_id} if run_id else {})}

    async def run(self, framework: str, prompt: str, who: str = "alice", run_id: str | None = None,
                  seconds: float = RUN_SECONDS, stream: bool = False) -> AgentRun:
        """One agent run of ``framework`` against the last gateway started (as ``who``, in run ``run_id``)."""
        driver = DRIVERS[framework]
        async with asyncio.timeout(seconds):
            return await driver(self.model_url, f"{self.url}/mcp", self.headers(who, run_id), prompt, stream=stream)

    def audited(self, *kinds: str) -> list[Json]:
        """The events of these kinds (``call.outcome``, ...) the last gateway started wrote to its decision log."""
        path = self.root / f"gw-{len(list(self.root.glob('gw-*'))) - 1}" / "data" / "audit.jsonl"
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [e for e in events if e.get("event") in kinds]

    def hook(self, name: str, action: Callable[[list[str]], Awaitable[None]]) -> None:
        """Have the fake model await ``action(results so far)`` before a scripted call naming ``name``."""
        self.model.hooks[name] = action

    # the approver API

    async def api(self, method: str, path: str, who: str = "dave", **kwargs: Any) -> httpx2.Response:
        """One request to the gateway's /v1 API as ``who``."""
        async with httpx2.AsyncClient(base_url=self.url, headers=auth_header(who), timeout=STEP_SECONDS) as client:
            return await client.request(method, path, **kwargs)

    async def approvals(self, state: str | None = None) -> list[Json]:
        """Every approval request (in ``state``, if given)."""
        params = {"state": state} if state else {}
        response = await self.api("GET", "/v1/approvals", params=params)
        assert response.status_code == 200, response.text
        found: list[Json] = response.json()["approvals"]
        return found

    async def wait_pending(self, tool: str) -> Json:
        """The one pending approval request for ``tool``, once the held call has created it."""
        deadline = time.monotonic() + STEP_SECONDS
        while True:
            found = [a for a in await self.approvals("pending") if a["tool"] == tool]
            if found:
                assert len(found) == 1, found
                return found[0]
            assert time.monotonic() < deadline, f"no pending approval for {tool} within {STEP_SECONDS}s"
            await asyncio.sleep(0.02)

    async def decide(self, approval_id: str, approve: bool, who: str = "dave", comment: str = "") -> None:
        """Approve or deny through the approver API."""
        response = await self.api("POST", f"/v1/approvals/{approval_id}/decision",
                                   who=who, json={"approve": approve, "comment": comment})
        assert response.status_code == 200, response.text
