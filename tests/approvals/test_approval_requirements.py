"""An approval releases only a call whose current requirements it covers (issue 18, items 3 and 9).

The rule ``deploys`` first needs ``group:ops`` (bob); a reload makes it need ``group:security``
(carol). An approval bob gave under the old rule must not run the call after the reload, neither
for a retry nor for a call that was still held when the reload came: each is a new request, held
for security. And a reload to a rule whose ``via: elicitation`` names approvers other than the
requester is refused with its position, so the requester's own client can never stand in for them.
A call that names no run finds its approved request from another implicit run (item 20).
Everything runs through a real gateway, its REST and MCP frontends, and a counting MCP upstream.
"""

from __future__ import annotations

import textwrap
from typing import Any

import mcp_types as types
import pytest
from approval_support import STEP_SECONDS, approve_rule, call_meta, finished, in_background, policy, text_of

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

OPS = policy(approve_rule("deploys", approvers=["group:ops"]))
SECURITY = policy(approve_rule("deploys", approvers=["group:security"]))


async def _reloaded(bench: Any, gw: Any, text: str, until: Any) -> None:
    """Write the policy file and wait until the gateway serves the new revision."""
    client = bench.rest(gw, "dave")
    before = (await client.get("/v1/policies")).json()["revision"]
    (gw.root / "policies" / "approvals.yaml").write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")

    async def changed() -> bool:
        body = (await client.get("/v1/policies")).json()
        return bool(body["revision"] != before and not body["errors"])

    await until(changed, timeout=STEP_SECONDS)


async def test_an_approval_given_under_a_weaker_rule_does_not_run_the_retry_after_a_stricter_reload(
        bench, call_id, until):
    gw = await bench.start(OPS)
    cid = call_id()
    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert held.status_code == 202, held.text
    old_id = held.json()["approval_id"]
    assert (await bench.decide(gw, "bob", old_id)).json()["state"] == "approved"

    await _reloaded(bench, gw, SECURITY, until)
    retry = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)

    assert retry.status_code == 202, retry.text  # held again, not run
    assert bench.upstream.ran("deploy") == 0
    new = await bench.approval(gw, retry.json()["approval_id"])
    assert new["id"] != old_id and new["state"] == "pending"
    assert [(r["rule"], r["approvers"]) for r in new["requirements"]] == [("approvals/deploys", ["group:security"])]
    assert new["upstream"] == "ops"
    old = await bench.approval(gw, old_id)
    assert (old["state"], old["execution"]["state"]) == ("expired", "superseded")
    assert "group:security" in old["execution"]["label"]
    assert (await bench.decide(gw, "bob", new["id"])).status_code == 403  # ops no longer decides it
    assert (await bench.decide(gw, "carol", new["id"])).json()["state"] == "approved"
    ran = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert ran.status_code == 200 and ran.json()["is_error"] is False, ran.text
    assert bench.upstream.ran("deploy", service="billing") == 1


async def test_a_call_held_across_a_stricter_reload_is_not_released_by_the_old_approver(bench, call_id, until):
    held_long = approve_rule("deploys", approvers=["group:ops"]).replace("on_timeout: reject", "on_timeout: reject,"
                                                                         " hold: 30s")
    gw = await bench.start(policy(held_long))
    cid = call_id()
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_deploy", {"service": "search"}, meta=call_meta(cid), read_timeout_seconds=60)) as call:
        first = await bench.wait_pending(gw, cid)
        await _reloaded(bench, gw, policy(held_long.replace("group:ops", "group:security")), until)
        assert (await bench.decide(gw, "bob", first["id"])).json()["state"] == "approved"

        async def asked_again() -> Any:
            found = [a for a in await bench.pending(gw) if a["call_id"] == cid and a["id"] != first["id"]]
            return found[0] if found else None

        second = await until(asked_again, timeout=STEP_SECONDS)  # the waiting call now waits on a new request
        assert [r["approvers"] for r in second["requirements"]] == [["group:security"]]
        assert not call.done() and bench.upstream.ran("deploy") == 0
        assert (await bench.decide(gw, "carol", second["id"])).json()["state"] == "approved"
        result = await finished(call)

    assert result.is_error is False, text_of(result)
    assert bench.upstream.ran("deploy", service="search") == 1
    assert (await bench.approval(gw, first["id"]))["execution"]["state"] == "superseded"


class Accepts:
    """An elicitation callback that always accepts (the requester's own client)."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked += 1
        return types.ElicitResult(action="accept", content={"approve": True})


async def test_elicitation_naming_other_approvers_is_refused_and_the_requesters_accept_runs_nothing(
        bench, call_id, until):
    gw = await bench.start(policy(approve_rule("deploys", approvers=["group:security"])))
    path = gw.root / "policies" / "approvals.yaml"
    hostile = policy(approve_rule("deploys", approvers=["group:security"], via="elicitation"))
    path.write_text(hostile, encoding="utf-8")
    client = bench.rest(gw, "dave")

    async def refused() -> Any:
        return (await client.get("/v1/policies")).json()["errors"]

    [error] = await until(refused, timeout=STEP_SECONDS)
    line = next(n for n, text in enumerate(hostile.splitlines(), 1) if "via: elicitation" in text)
    assert (error["code"], error["rule"], error["file"], error["line"]) == \
        ("invalid-value", "approvals/deploys", "policies/approvals.yaml", line)
    assert error["column"] == hostile.splitlines()[line - 1].index("elicitation") + 1  # at the value of via
    assert "self" in error["hint"]

    user = Accepts()
    async with bench.mcp(gw, "alice", elicit=user) as mcp:
        result = await mcp.call_tool("ops_deploy", {"service": "search"}, meta=call_meta(call_id()),
                                     read_timeout_seconds=STEP_SECONDS)
    assert result.meta["gateway/decision"] == "pending", text_of(result)  # the last good rule: security decides
    assert user.asked == 0 and bench.upstream.ran("deploy") == 0


async def test_a_rest_retry_from_another_implicit_run_runs_the_approved_call_once(bench):
    """A client that names no run and comes back in another implicit run (here: another User-Agent, as a new
    MCP session per call will be) finds its approved request: the call runs once, and is not asked again."""
    gw = await bench.start(OPS)
    client = bench.rest(gw, "alice")

    async def invoke(agent: str) -> Any:
        return await client.post("/v1/tools/ops_deploy/invoke", json={"arguments": {"service": "per-call"}},
                                 headers={"User-Agent": agent})

    held = await invoke("session-per-call/1 (first)")
    assert held.status_code == 202, held.text
    approval = await bench.approval(gw, held.json()["approval_id"])
    assert approval["bound_by"] == "principal" and approval["upstream"] == "ops"
    assert (await bench.decide(gw, "bob", approval["id"])).json()["state"] == "approved"

    ran = await invoke("session-per-call/1 (second)")

    assert ran.status_code == 200 and ran.json()["is_error"] is False, ran.text
    assert ran.json()["meta"]["gateway/approval_id"] == approval["id"]
    assert bench.upstream.ran("deploy", service="per-call") == 1
    assert (await bench.pending(gw)) == []
