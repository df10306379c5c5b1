"""An approved call whose upstream credential cannot be had: nothing is sent, the caller is told why, and the
approval stays valid, so the retry runs once the identity provider answers again."""

from __future__ import annotations

import pytest
from approval_support import approve_rule, policy
from loopback import serve_app
from token_endpoint import CLIENT_ID, CLIENT_SECRET, TokenEndpointApp

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live


async def test_an_approved_call_without_a_credential_keeps_its_approval(bench, call_id, monkeypatch):
    monkeypatch.setenv("TEST_OPS_CLIENT_SECRET", CLIENT_SECRET)
    idp = TokenEndpointApp(expires_in=None)  # never kept: every request of the gateway asks anew
    async with serve_app(idp.app(), lifespan="off") as idp_url:
        await held_then_approved_then_retried(bench, idp, idp_url, call_id())


async def held_then_approved_then_retried(bench, idp: TokenEndpointApp, idp_url: str, cid: str) -> None:
    auth = {"client_credentials": {"token_url": f"{idp_url}/token", "client_id": CLIENT_ID,
                                   "client_secret": {"env": "TEST_OPS_CLIENT_SECRET"}}}
    gw = await bench.start(policy(approve_rule("deploys-need-ops", approvers=["group:ops"])),
                           upstreams=[{"name": "ops", "mcp": {"url": f"{bench.upstream.url}/mcp", "auth": auth}}])
    held = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert held.status_code == 202, held.text
    assert (await bench.decide(gw, "bob", held.json()["approval_id"])).status_code == 200

    idp.refuse = "temporarily_unavailable"
    refused = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert refused.json()["content"][0]["text"] == (
        "No credential for upstream 'ops': the identity provider refused the token request (temporarily_unavailable)."
        " The tool did not run. The approval is still valid: call again to run it.")
    assert bench.upstream.ran("deploy") == 0

    idp.refuse = None
    ran = await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=cid)
    assert ran.json()["is_error"] is False, ran.text
    assert bench.upstream.ran("deploy") == 1
    assert CLIENT_SECRET not in refused.text + ran.text
