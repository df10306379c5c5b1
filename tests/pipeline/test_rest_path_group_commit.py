"""Through the real gateway with ``audit.fsync`` on: concurrent REST calls' intents are group-committed, and
each call's tool runs only after its own intent is in the file (the upstream looks when the request arrives)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

POLICY = {"p.yaml": "policy: p\nrules: []\n"}
TOOLS = [{"name": "create_item", "method": "POST", "path": "/items",
          "input_schema": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}]


def looking_upstream(audit: list[Path], seen: dict[str, bool]) -> Starlette:
    """POST /items: notes whether the audit file already held the intent of the call named in the body."""

    async def create(request: Request) -> JSONResponse:
        name = (await request.json())["name"]
        text = audit[0].read_text(encoding="utf-8") if audit and audit[0].is_file() else ""
        seen[name] = any(json.loads(line).get("call_id") == name and json.loads(line)["event"] == "call.intent"
                         for line in text.splitlines() if line)
        return JSONResponse({"created": name})

    return Starlette(routes=[Route("/items", create, methods=["POST"])])


async def test_concurrent_calls_each_run_only_after_their_own_intent_is_durable(
        start_gateway: Any, configs: Any, rest: Any, rest_call: Any) -> None:
    audit: list[Path] = []
    seen: dict[str, bool] = {}
    async with serve_app(looking_upstream(audit, seen), lifespan="off") as url:
        await check(start_gateway, configs, rest, rest_call, url, audit, seen)


async def check(start_gateway: Any, configs: Any, rest: Any, rest_call: Any, url: str, audit: list[Path],
                seen: dict[str, bool]) -> None:
    config = configs.base(configs.http_upstream("api", url, TOOLS), audit={"file": "data/audit.jsonl", "fsync": True})
    gateway = await start_gateway(config, POLICY)
    audit.append(gateway.audit_path)
    group = gateway.gateway.audit.group
    assert group is not None  # fsync on a file: intents go through the group commit
    client = rest(gateway)
    ids = [f"c-{uuid.uuid4().hex}" for _ in range(24)]
    answers = await asyncio.gather(*[rest_call(client, "api_create_item", {"name": cid}, call_id=cid) for cid in ids])
    assert [a["decision"] for a in answers] == ["allow"] * len(ids)
    assert seen == {cid: True for cid in ids}  # every tool ran with its intent already in the file
    assert group.lines >= len(ids)
    events = gateway.audit_events()
    for cid in ids:
        assert [e["event"] for e in events if e.get("call_id") == cid] == ["call.intent", "call.outcome"]
