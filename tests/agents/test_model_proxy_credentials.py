"""The model proxy runs a gateway tool whose upstream exchanges the caller's token (RFC 8693): the caller signed
in with the real IdP (tests/idp_support.py), the scripted model calls the tool, and the upstream verifies with
the IdP's JWKS that the token it got is the caller's, issued for it. The caller's token and the exchanged one
reach neither the model nor the audit log.
"""

from __future__ import annotations

import json

import httpx2
import pytest
from agent_stage import STEP_SECONDS, Stage
from fake_model import MODEL, script, tool_results_of
from idp_support import Idp
from upstream_identity_support import AUDIENCE, WHOAMI, assert_nowhere, parts

GATEWAY_AUDIENCE = "https://gateway.test/mcp"
POLICY = "policy: p\nrules: [{id: r, action: allow}]\n"


@pytest.fixture(autouse=True)
def service_secret(idp: Idp, monkeypatch: pytest.MonkeyPatch) -> None:
    assert idp.service.client_secret is not None
    monkeypatch.setenv("TEST_IDP_SERVICE_SECRET", idp.service.client_secret)


async def test_a_gateway_tool_called_by_the_model_runs_on_behalf_of_the_caller(stage: Stage, idp: Idp) -> None:
    alice = await idp.user_token("alice", resource=GATEWAY_AUDIENCE)
    async with parts(idp) as (upstream, proxy, api, token_url):
        exchange = {"token_url": token_url, "client_id": idp.service.client_id,
                    "client_secret": {"env": "TEST_IDP_SERVICE_SECRET"}, "resource": AUDIENCE}
        await stage.start(POLICY, models=[{"name": "*", "base_url": f"{stage.model_url}/v1", "model": MODEL,
                                            "gateway_tools": ["who_*"]}],
                          upstreams=[{"name": "who", "http": {"base_url": api, "tools": WHOAMI,
                                                              "auth": {"token_exchange": exchange}}}],
                          auth={"jwt": [{"issuer": idp.issuer, "audiences": [GATEWAY_AUDIENCE]}]})
        async with httpx2.AsyncClient(base_url=stage.url, headers={"Authorization": f"Bearer {alice}"},
                                      timeout=STEP_SECONDS) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": script(("who_whoami", {}))}]})
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    assert len(tool_results_of(content)) == 1, content
    [seen] = tool_results_of(content)
    claims = json.loads(seen)
    assert (claims["sub"], claims["aud"], claims["act"]) == ("alice", AUDIENCE, {"sub": idp.service.client_id})
    assert proxy.grants == ["urn:ietf:params:oauth:grant-type:token-exchange"]
    audit = "\n".join(p.read_text() for p in stage.root.glob("gw-*/data/audit.jsonl"))
    assert_nowhere([alice, upstream.tokens[0]], json.dumps(stage.model.requests), response.text, audit)
