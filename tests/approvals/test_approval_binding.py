"""An approval releases exactly the call that was approved (issue 7, item 1).

A request is bound to (principal, exposed tool, call id, digest of the final arguments). The
attacker here is the agent itself: it got ``ops_deploy`` approved under call id ``c``, then asks for
``pay_transfer`` — another tool, needing another approver group — under the same call id with
arguments of the same digest. That must be a new request, held for its own approvers, with nothing
sent to the payments service, whichever frontend the approval and the attack come through.

Also here: an approval is only valid for ``valid_for`` after it is given; a vote after the request
expired is refused; and an attempt that never reached the upstream (connection refused) leaves the
approval usable, so the retry after the service is back runs exactly once.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from typing import Any

import pytest
import uvicorn
from approval_support import PUBLIC_URL, api_keys, approve_rule, call_meta, finished, in_background, policy, text_of
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

TRANSFER = {"name": "transfer", "method": "POST", "path": "/items",
            "input_schema": {"type": "object", "required": ["service"], "properties": {"service": {"type": "string"}}}}

TWO_TOOLS = policy(approve_rule("deploys-need-ops", "ops_deploy", approvers=["group:ops"]),
                   approve_rule("transfers-need-security", "pay_transfer", approvers=["group:security"],
                                message="Money moves need security."))


async def _two_tools(bench: Any, http_api: Any) -> Any:
    """A gateway with ``ops_deploy`` (MCP upstream) and ``pay_transfer`` (HTTP upstream), same argument shape."""
    config = bench.configs.base(
        {"name": "ops", "mcp": {"url": f"{bench.upstream.url}/mcp"}},
        bench.configs.http_upstream("pay", http_api.url, [TRANSFER]),
        auth={"api_keys": api_keys()}, approvals={"public_url": PUBLIC_URL})
    path = bench.configs.write(bench.root / f"gw-{uuid.uuid4().hex[:6]}", config, {"approvals.yaml": TWO_TOOLS})
    return await bench.stack.enter_async_context(bench.gateway(path))


def _marker() -> str:
    return f"svc-{uuid.uuid4().hex[:10]}"


async def _approved_over_rest(bench: Any, gw: Any, cid: str, service: str) -> dict[str, Any]:
    held = await bench.invoke(gw, "ops_deploy", {"service": service}, call_id=cid)
    assert held.status_code == 202, held.text
    decided = await bench.decide(gw, "bob", held.json()["approval_id"])
    assert (decided.status_code, decided.json()["state"]) == (200, "approved"), decided.text
    approved: dict[str, Any] = decided.json()
    return approved


async def _assert_new_request_for_transfer(bench: Any, gw: Any, approval_id: str, deploy: dict[str, Any],
                                           cid: str) -> None:
    transfer = await bench.approval(gw, approval_id)
    assert approval_id != deploy["id"]
    assert (transfer["tool"], transfer["state"], transfer["call_id"]) == ("pay_transfer", "pending", cid)
    assert transfer["args_digest"] == deploy["args_digest"]  # the same digest: only the tool differs
    assert [r["approvers"] for r in transfer["requirements"]] == [["group:security"]]
    refused = await bench.decide(gw, "bob", approval_id)  # the deploy's approver group cannot release it
    assert refused.status_code in (403, 404), refused.text


async def test_rest_approval_of_one_tool_never_releases_another_tool_over_rest(bench, http_api, call_id):
    gw = await _two_tools(bench, http_api)
    cid, service = call_id(), _marker()
    deploy = await _approved_over_rest(bench, gw, cid, service)

    attack = await bench.invoke(gw, "pay_transfer", {"service": service}, call_id=cid)

    assert attack.status_code == 202, attack.text
    await _assert_new_request_for_transfer(bench, gw, attack.json()["approval_id"], deploy, cid)
    assert http_api.seen(service) == []
    # The approved call itself still runs, once.
    ran = await bench.invoke(gw, "ops_deploy", {"service": service}, call_id=cid)
    assert (ran.status_code, ran.json()["is_error"]) == (200, False), ran.text
    assert bench.upstream.ran("deploy", service=service) == 1
    again = await bench.invoke(gw, "pay_transfer", {"service": service}, call_id=cid)
    assert (again.status_code, again.json()["approval_id"]) == (202, attack.json()["approval_id"])
    assert http_api.seen(service) == []


async def test_rest_approval_of_one_tool_never_releases_another_tool_over_mcp(bench, http_api, call_id):
    gw = await _two_tools(bench, http_api)
    cid, service = call_id(), _marker()
    deploy = await _approved_over_rest(bench, gw, cid, service)

    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "pay_transfer", {"service": service}, meta=call_meta(cid))) as attack:
        pending = await bench.wait_pending(gw, cid)  # the deploy is approved, so this one is the transfer's
        await _assert_new_request_for_transfer(bench, gw, pending["id"], deploy, cid)
        assert not attack.done() and http_api.seen(service) == []
        assert (await bench.decide(gw, "carol", pending["id"], approve=False, comment="no")).status_code == 200
        result = await finished(attack)

    assert result.is_error is True and "Denied by an approver: no" in text_of(result)
    assert http_api.seen(service) == []
    assert bench.upstream.ran("deploy", service=service) == 0  # approved, never retried: not run either


async def test_mcp_approval_of_one_tool_never_releases_another_tool_over_rest(bench, http_api, call_id):
    gw = await _two_tools(bench, http_api)
    cid, service = call_id(), _marker()
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_deploy", {"service": service}, meta=call_meta(cid))) as call:
        deploy = await bench.wait_pending(gw, cid)
        assert (await bench.decide(gw, "bob", deploy["id"])).status_code == 200
        result = await finished(call)
    assert result.is_error is False and bench.upstream.ran("deploy", service=service) == 1

    attack = await bench.invoke(gw, "pay_transfer", {"service": service}, call_id=cid)

    assert attack.status_code == 202, attack.text
    await _assert_new_request_for_transfer(bench, gw, attack.json()["approval_id"], deploy, cid)
    assert http_api.seen(service) == []


# --- how long an approval holds ------------------------------------------------------------------------


def _rule(valid_for: str = "", timeout: str = "30s", on_timeout: str = "reject") -> str:
    extra = f", valid_for: {valid_for}" if valid_for else ""
    block = f'{{approvers: ["group:ops"], timeout: {timeout}, on_timeout: {on_timeout}{extra}}}'
    return policy(f"  - id: deploys-need-ops\n    tools: [ops_deploy]\n    action: approve\n    approval: {block}\n")


async def test_an_approval_not_used_within_valid_for_needs_a_new_approval(bench, call_id):
    gw = await bench.start(_rule(valid_for="1s"))
    cid = call_id()
    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    first = held.json()["approval_id"]
    decided = await bench.decide(gw, "bob", first)
    assert decided.json()["valid_for_seconds"] == 1.0 and decided.json()["valid_until"]
    await asyncio.sleep(1.3)

    late = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)

    body = late.json()
    assert (late.status_code, body["decision"], body["is_error"]) == (200, "reject", True), late.text
    assert "expired unused" in body["content"][0]["text"] and "new approval" in body["content"][0]["text"]
    assert bench.upstream.ran("deploy") == 0
    assert (await bench.approval(gw, first))["state"] == "expired"
    # The next call with the same key asks afresh; approved again, it runs once.
    fresh = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert fresh.status_code == 202, fresh.text
    second = fresh.json()["approval_id"]
    assert second != first
    assert (await bench.decide(gw, "bob", second)).status_code == 200
    ran = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert (ran.status_code, ran.json()["is_error"]) == (200, False), ran.text
    assert bench.upstream.ran("deploy") == 1


async def test_the_default_valid_for_is_ten_minutes(bench, call_id):
    gw = await bench.start(_rule())
    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=call_id())
    assert (await bench.approval(gw, held.json()["approval_id"]))["valid_for_seconds"] == 600.0


async def test_a_vote_after_the_request_expired_is_refused_and_releases_nothing(bench, call_id):
    gw = await bench.start(_rule(timeout="1s"))
    cid = call_id()
    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    approval_id = held.json()["approval_id"]
    await asyncio.sleep(1.2)

    vote = await bench.decide(gw, "bob", approval_id)

    assert vote.status_code == 409, vote.text
    assert "expired" in vote.json()["error"]["message"]
    retry = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert (retry.status_code, retry.json()["is_error"]) == (200, True)
    assert "in time" in retry.json()["content"][0]["text"]
    assert bench.upstream.ran("deploy") == 0
    stored = await bench.approval(gw, approval_id)
    assert stored["state"] == "expired" and [v["approver"] for v in stored["votes"]] == ["timeout"]


# --- an attempt that never reached the upstream ---------------------------------------------------------


class Charges:
    """A payments service that counts charges; served later on a port reserved now."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused until ``serve``
        self.port = self.sock.getsockname()[1]
        self.charges: list[dict[str, Any]] = []

    async def _charge(self, request: Request) -> JSONResponse:
        self.charges.append(await request.json())
        return JSONResponse({"charged": len(self.charges)})

    async def serve(self) -> tuple[uvicorn.Server, asyncio.Task[None]]:
        """Start listening on the reserved port."""
        self.sock.listen()
        app = Starlette(routes=[Route("/charge", self._charge, methods=["POST"])])
        server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None, log_level="warning"))
        task = asyncio.create_task(server.serve(sockets=[self.sock]))
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        return server, task


async def test_a_refused_connection_leaves_the_approval_usable_and_the_retry_runs_once(bench, call_id):
    charges = Charges()
    tool = {"name": "charge", "method": "POST", "path": "/charge",
            "input_schema": {"type": "object", "required": ["order"], "properties": {"order": {"type": "string"}}}}
    config = bench.configs.base(bench.configs.http_upstream("pay", f"http://127.0.0.1:{charges.port}", [tool]),
                                auth={"api_keys": api_keys()}, approvals={"public_url": PUBLIC_URL})
    rule = approve_rule("charges-need-ops", "pay_charge", approvers=["group:ops"])
    gw = await bench.stack.enter_async_context(
        bench.gateway(bench.configs.write(bench.root / "gw-charges", config, {"approvals.yaml": policy(rule)})))
    cid = call_id()
    held = await bench.invoke(gw, "pay_charge", {"order": "A-1"}, call_id=cid)
    approval_id = held.json()["approval_id"]
    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200

    refused = await bench.invoke(gw, "pay_charge", {"order": "A-1"}, call_id=cid)

    body = refused.json()
    assert (refused.status_code, body["decision"], body["is_error"]) == (200, "tool_failed", True), refused.text
    assert "could not be reached" in body["content"][0]["text"] and "still valid" in body["content"][0]["text"]
    assert (await bench.approval(gw, approval_id))["state"] == "approved"
    server, task = await charges.serve()
    try:
        ran = await bench.invoke(gw, "pay_charge", {"order": "A-1"}, call_id=cid)
        assert (ran.status_code, ran.json()["is_error"], ran.json()["structured"]) == (200, False, {"charged": 1})
        replay = await bench.invoke(gw, "pay_charge", {"order": "A-1"}, call_id=cid)
        assert replay.json()["structured"] == {"charged": 1}
        assert charges.charges == [{"order": "A-1"}]
        assert (await bench.approval(gw, approval_id))["state"] == "executed"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_an_error_response_uses_the_approval_up(bench, http_api, call_id):
    config = bench.configs.base(bench.configs.http_upstream("api", http_api.url),
                                auth={"api_keys": api_keys()}, approvals={"public_url": PUBLIC_URL})
    rule = approve_rule("boom-needs-ops", "api_boom", approvers=["group:ops"])
    gw = await bench.stack.enter_async_context(
        bench.gateway(bench.configs.write(bench.root / "gw-boom", config, {"approvals.yaml": policy(rule)})))
    cid = call_id()
    before = len([r for r in http_api.requests if r["path"] == "/boom"])
    held = await bench.invoke(gw, "api_boom", {}, call_id=cid)
    approval_id = held.json()["approval_id"]
    assert (await bench.decide(gw, "bob", approval_id)).status_code == 200

    failed = await bench.invoke(gw, "api_boom", {}, call_id=cid)
    again = await bench.invoke(gw, "api_boom", {}, call_id=cid)

    assert failed.json()["is_error"] is True and "HTTP 500" in failed.json()["content"][0]["text"]
    assert again.json()["content"] == failed.json()["content"]  # the stored outcome, not a second run
    assert len([r for r in http_api.requests if r["path"] == "/boom"]) == before + 1
    assert (await bench.approval(gw, approval_id))["state"] == "executed"
