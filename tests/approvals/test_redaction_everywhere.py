"""A secret in a held call's arguments, nested far past any depth limit, shows nowhere: not in the approver
API (what the approvals page reads), not in the stored request, not in webhooks, not in the audit log.
The call still runs with the real arguments once approved.

A real gateway on loopback, the counting MCP upstream, a real webhook receiver, REST clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from approval_support import PUBLIC_URL, api_keys, approve_rule, policy
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

PASSWORD = "hunter2"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"  # matched by a configured redact pattern, not by its key
DEPTH = 60  # deep, yet within the 64 levels a call may nest (the Redactor alone is tested far deeper)


def deep_args() -> dict[str, Any]:
    """Arguments whose secrets sit DEPTH containers down, under a secret key and in a free-text field."""
    inner: Any = {"password": PASSWORD, "note": f"use {ACCESS_KEY} for the upload"}
    for level in range(DEPTH):
        inner = {"level": level, "next": inner} if level % 2 else [inner]
    return {"service": "billing", "config": inner}


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []

    async def hook(request: Request) -> PlainTextResponse:
        bodies.append(await request.body())
        return PlainTextResponse("ok")

    async with serve_app(Starlette(routes=[Route("/hook", hook, methods=["POST"])]), lifespan="off") as url:
        yield f"{url}/hook", bodies


def leaks(text: str) -> list[str]:
    return [secret for secret in (PASSWORD, ACCESS_KEY) if secret in text]


def stored_bytes(root: Path) -> str:
    """Everything SQLite holds on disk for this gateway (database, WAL, journal)."""
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in (root / "data").glob("gateway.sqlite3*"))


async def test_a_deep_secret_in_a_held_call_is_redacted_on_every_surface(bench: Any, call_id: Any,
                                                                          until: Any) -> None:
    async with webhook_receiver() as (hook_url, bodies):
        root = bench.root / "redaction"
        config = bench.configs.base(
            {"name": "ops", "mcp": {"url": f"{bench.upstream.url}/mcp"}}, auth={"api_keys": api_keys()},
            approvals={"public_url": PUBLIC_URL, "webhooks": [{"url": hook_url}]},
            audit={"file": "data/audit.jsonl", "redact_patterns": ["AKIA[0-9A-Z]{16}"]})
        gw = await bench.stack.enter_async_context(bench.gateway(bench.configs.write(
            root, config, {"approvals.yaml": policy(approve_rule("needs-ok", approvers=["group:ops"]))})))
        cid = call_id()

        held = await bench.invoke(gw, "ops_deploy", deep_args(), call_id=cid)
        assert held.status_code == 202, held.text
        pending = await bench.wait_pending(gw, cid)

        # The approver API: the list the page polls, and one request.
        listed = await bench.rest(gw, "dave").get("/v1/approvals")
        one = await bench.rest(gw, "dave").get(f"/v1/approvals/{pending['id']}")
        own = await bench.rest(gw, "alice").get(f"/v1/approvals/{pending['id']}")  # the caller's view too
        for response in (listed, one, own):
            assert response.status_code == 200
            assert leaks(response.text) == [], response.text[:300]
            assert "[REDACTED]" in response.text
        assert len(json.dumps(one.json()["final_args"])) > DEPTH * 10  # the structure is kept, only secrets go

        # Stored: the database holds only the redacted copy.
        assert leaks(stored_bytes(root)) == []

        # Decided, then run with the real arguments the caller sends again.
        assert (await bench.decide(gw, "bob", pending["id"])).status_code == 200
        done = await bench.invoke(gw, "ops_deploy", deep_args(), call_id=cid)
        assert done.status_code == 200, done.text
        assert bench.upstream.ran("deploy", config=deep_args()["config"]) == 1

        # Webhooks: created and decided.
        await until(lambda: asyncio.sleep(0, len(bodies) >= 2))
        assert {json.loads(b)["type"] for b in bodies} == {"approval.created", "approval.decided"}
        assert leaks(b"".join(bodies).decode()) == []

        # The audit log: the held call and the run.
        audit = gw.audit_path.read_text(encoding="utf-8")
        assert len([e for e in gw.audit_events() if e.get("call_id") == cid]) == 3  # held, intent, outcome
        assert leaks(audit) == []
        event = gw.audit_events()[-1]
        assert any(p.endswith("/password") for p in event["redacted"])
        assert any(p.endswith("/note") for p in event["redacted"])


async def test_approvals_redact_false_shows_approvers_the_real_arguments(bench: Any, call_id: Any) -> None:
    root = bench.root / "no-redaction"
    config = bench.configs.base(
        {"name": "ops", "mcp": {"url": f"{bench.upstream.url}/mcp"}}, auth={"api_keys": api_keys()},
        approvals={"public_url": PUBLIC_URL, "redact": False})
    gw = await bench.stack.enter_async_context(bench.gateway(bench.configs.write(
        root, config, {"approvals.yaml": policy(approve_rule("needs-ok", approvers=["group:ops"]))})))
    cid = call_id()
    assert (await bench.invoke(gw, "ops_deploy", deep_args(), call_id=cid)).status_code == 202
    pending = await bench.wait_pending(gw, cid)
    assert PASSWORD in json.dumps(pending["final_args"])
    assert PASSWORD not in gw.audit_path.read_text(encoding="utf-8")  # the audit log still redacts


def test_the_redactor_has_no_depth_limit_and_keeps_document_order() -> None:
    from gateway.pipeline.audit import Redactor

    redactor = Redactor(["password"], ["AKIA[0-9A-Z]{16}"])
    value: Any = {"password": PASSWORD}
    for _ in range(100_000):  # far deeper than any recursive walk could go
        value = {"x": [value]}
    redacted, found = redactor.apply(value, "/args")
    assert found == ["/args" + "/x/0" * 100_000 + "/password"]
    node = redacted
    while "x" in node:
        node = node["x"][0]
    assert node == {"password": "[REDACTED]"}

    flat, where = redactor.apply({"a/b": [ACCESS_KEY, {"Password": 1}], "c": {"~": ACCESS_KEY}})
    assert flat == {"a/b": ["[REDACTED]", {"Password": "[REDACTED]"}], "c": {"~": "[REDACTED]"}}
    assert where == ["/a~1b/0", "/a~1b/1/Password", "/c/~0"]
