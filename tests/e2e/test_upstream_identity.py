"""Upstream credentials from the real IdP (tests/idp_support.py: npm oidc-provider on loopback), end to end.

The gateway runs under uvicorn; its token requests go to the IdP through a counting proxy of ours on
loopback (so "one fetch" is counted where the requests arrive, not guessed); the upstream is a real HTTP API
that verifies the bearer token it receives with the IdP's JWKS (signature, issuer, ``aud`` = its own
audience, ``sub``) and answers with the claims it saw. Nothing the IdP issued, nor the client secret, reaches
the agent, the audit log or the logs.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from idp_support import Idp
from upstream_identity_support import AUDIENCE, WHOAMI, assert_nowhere, everything_logged, parts

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the harness lives

Json = dict[str, Any]
POLICIES = {"p.yaml": "policy: p\nrules: [{id: r, action: allow}]\n"}
SECRET_ENV = "TEST_IDP_SERVICE_SECRET"


@pytest.fixture(autouse=True)
def service_secret(idp: Idp, monkeypatch: pytest.MonkeyPatch) -> str:
    assert idp.service.client_secret is not None
    monkeypatch.setenv(SECRET_ENV, idp.service.client_secret)
    return idp.service.client_secret


def client_credentials(idp: Idp, token_url: str | None = None) -> Json:
    where = {"token_url": token_url} if token_url else {"issuer": idp.issuer}
    return {"client_credentials": {**where, "client_id": idp.service.client_id,
                                   "client_secret": {"env": SECRET_ENV}, "resource": AUDIENCE, "scopes": ["read"]}}


async def test_client_credentials_the_upstream_verifies_the_gateways_own_token(
        idp, start_gateway, configs, rest, rest_call, call_id, caplog, service_secret):
    caplog.set_level(logging.DEBUG)
    async with parts(idp) as (upstream, proxy, api, token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp, token_url)})), POLICIES)
        alice, bob = rest(gateway, "alice"), rest(gateway, "bob")
        bodies = [await rest_call(alice, "who_whoami", {}), await rest_call(bob, "who_whoami", {}),
                  await rest_call(alice, "who_whoami", {}, call_id=call_id())]
    for body in bodies:
        assert body["is_error"] is False, body
        # the gateway's own token: its subject and client are the service client, its audience the upstream
        assert body["structured"] == {"scheme": "Bearer", "sub": idp.service.client_id, "aud": AUDIENCE,
                                      "client_id": idp.service.client_id, "act": None, "scope": "read"}
    assert proxy.grants == ["client_credentials"]  # one token request for three calls by two callers
    assert len(set(upstream.tokens)) == 1
    assert_nowhere([upstream.tokens[0], service_secret], json.dumps(bodies), gateway.audit_path.read_text(),
                   everything_logged(caplog))


async def test_client_credentials_found_by_discovery_at_the_issuer(idp, start_gateway, configs, rest, rest_call):
    async with parts(idp) as (_, _proxy, api, _token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp)})), POLICIES)
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {})
    assert body["structured"]["sub"] == idp.service.client_id and body["structured"]["aud"] == AUDIENCE


async def test_a_wrong_client_secret_fails_the_call_closed(idp, start_gateway, configs, rest, rest_call, call_id,
                                                          monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(SECRET_ENV, "not-the-secret-4471")
    async with parts(idp) as (upstream, _proxy, api, token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp, token_url)})), POLICIES)
        cid = call_id()
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {}, call_id=cid)
    assert body["is_error"] is True
    assert body["content"][0]["text"] == ("No credential for upstream 'who': the identity provider refused the token"
                                          " request (invalid_client). The tool did not run.")
    assert upstream.tokens == []
    assert gateway.audit_event(cid)["upstream_outcome"]["reached"] is False
    assert_nowhere(["not-the-secret-4471"], json.dumps(body), gateway.audit_path.read_text(),
                   everything_logged(caplog))


# --- token exchange: the caller's token exchanged for one for the upstream (needs auth.jwt) ----------------

GATEWAY_AUDIENCE = "https://gateway.test/mcp"


def token_exchange(idp: Idp, token_url: str) -> Json:
    return {"token_exchange": {"token_url": token_url, "client_id": idp.service.client_id,
                               "client_secret": {"env": SECRET_ENV}, "resource": AUDIENCE, "scopes": ["read"]}}


def signed_in(configs: Any, idp: Idp, *upstreams: Json) -> Json:
    """A config whose callers are API keys (alice, bob) or tokens from the IdP."""
    return configs.base(*upstreams, auth={"api_keys": configs.api_keys("alice", "bob"),
                                          "jwt": [{"issuer": idp.issuer, "audiences": [GATEWAY_AUDIENCE]}]})


@contextlib.asynccontextmanager
async def as_caller(gateway: Any, token: str) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=30) as client:
        yield client


async def test_token_exchange_each_caller_reaches_the_upstream_as_themselves(
        idp, start_gateway, configs, rest_call, call_id, caplog, service_secret):
    caplog.set_level(logging.DEBUG)
    alice = await idp.user_token("alice", resource=GATEWAY_AUDIENCE, scope="read")
    bob = await idp.user_token("bob", resource=GATEWAY_AUDIENCE, scope="read")
    async with parts(idp) as (upstream, proxy, api, token_url):
        gateway = await start_gateway(signed_in(configs, idp, configs.http_upstream(
            "who", api, WHOAMI, {"auth": token_exchange(idp, token_url)})), POLICIES)
        async with as_caller(gateway, alice) as as_alice, as_caller(gateway, bob) as as_bob:
            bodies = [await rest_call(as_alice, "who_whoami", {}, call_id=call_id()),
                      await rest_call(as_bob, "who_whoami", {}),
                      await rest_call(as_alice, "who_whoami", {})]
    seen = [(b["structured"]["sub"], b["structured"]["aud"], b["structured"]["act"]) for b in bodies]
    acting = {"sub": idp.service.client_id}  # RFC 8693 act: the gateway acts on the caller's behalf
    assert seen == [("alice", AUDIENCE, acting), ("bob", AUDIENCE, acting), ("alice", AUDIENCE, acting)]
    assert proxy.grants == ["urn:ietf:params:oauth:grant-type:token-exchange"] * 2  # alice's is kept
    assert len(set(upstream.tokens)) == 2 and not {alice, bob} & set(upstream.tokens)  # never passed through
    assert_nowhere([alice, bob, *set(upstream.tokens), service_secret], json.dumps(bodies),
                   gateway.audit_path.read_text(), everything_logged(caplog))


async def test_token_exchange_over_mcp(idp, start_gateway, configs, connect_mcp, caplog):
    caplog.set_level(logging.DEBUG)
    alice = await idp.user_token("alice", resource=GATEWAY_AUDIENCE)
    async with parts(idp) as (upstream, _proxy, api, token_url):
        gateway = await start_gateway(signed_in(configs, idp, configs.http_upstream(
            "who", api, WHOAMI, {"auth": token_exchange(idp, token_url)})), POLICIES)
        async with connect_mcp(gateway, None, headers={"Authorization": f"Bearer {alice}"}) as conn:
            result = await conn.call("who_whoami", {})
    assert result.is_error is False and result.structured_content["sub"] == "alice"
    assert_nowhere([alice, upstream.tokens[0]], json.dumps(result.model_dump(mode="json")),
                   gateway.audit_path.read_text(), everything_logged(caplog))


NO_TOKEN = ("Upstream 'who' acts on behalf of the caller, so it needs a caller signed in with the identity provider"
            " (a token); a caller with an API key, or none, cannot use it. The tool did not run.")


async def test_an_api_key_caller_is_refused_by_a_token_exchange_upstream(idp, start_gateway, configs, rest,
                                                                        rest_call, call_id):
    async with parts(idp) as (upstream, proxy, api, token_url):
        gateway = await start_gateway(signed_in(configs, idp, configs.http_upstream(
            "who", api, WHOAMI, {"auth": token_exchange(idp, token_url)})), POLICIES)
        cid = call_id()
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {}, call_id=cid)
    assert body["is_error"] is True and body["decision"] == "caller_token_required"
    assert body["content"][0]["text"] == NO_TOKEN
    assert proxy.grants == [] and upstream.tokens == []
    event = gateway.audit_event(cid)  # refused at admission, on the record like any refused call
    assert event["verdict"] == "caller_token_required" and event["message"] == NO_TOKEN
    assert event["principal"]["id"] == "alice"
    assert event["rules"] == [] and event["upstream_outcome"] == {"status": "not_called"}  # before the policies


async def test_an_api_key_callers_call_that_needs_approval_is_refused_before_an_approver_is_asked(
        idp, start_gateway, configs, rest, rest_call, call_id):
    """A call that could never run (no caller token for a token-exchange upstream) is not put to an approver."""
    held = ("policy: p\nrules:\n  - id: ask\n    tools: [who_whoami]\n    action: approve\n"
            "    approval: {approvers: [\"group:staff\"], timeout: 5m}\n")
    async with parts(idp) as (upstream, proxy, api, token_url):
        config = signed_in(configs, idp, configs.http_upstream("who", api, WHOAMI,
                                                               {"auth": token_exchange(idp, token_url)}))
        config["auth"]["api_keys"][1]["approver"] = True  # bob decides approvals
        gateway = await start_gateway(config, {"p.yaml": held})
        cid = call_id()
        body = await rest_call(rest(gateway, "alice"), "who_whoami", {}, call_id=cid)
        listed = await rest(gateway, "bob").get("/v1/approvals", params={"state": "pending"})
    assert body["is_error"] is True and body["decision"] == "caller_token_required", body  # at once, not pending
    assert body["content"][0]["text"] == NO_TOKEN
    assert listed.status_code == 200 and listed.json()["approvals"] == []  # nobody is asked
    assert not [e for e in gateway.audit_events() if str(e.get("event", "")).startswith("approval")]
    event = gateway.audit_event(cid)
    assert event["verdict"] == "caller_token_required" and event["rules"] == [] and event["approval"] is None
    assert proxy.grants == [] and upstream.tokens == []


async def test_an_upstream_that_echoes_its_token_does_not_hand_it_to_the_agent(idp, start_gateway, configs, rest,
                                                                              rest_call, call_id):
    async with parts(idp) as (upstream, _proxy, api, token_url):
        gateway = await start_gateway(configs.base(configs.http_upstream(
            "who", api, WHOAMI, {"auth": client_credentials(idp, token_url)})), POLICIES)
        cid = call_id()
        body = await rest_call(rest(gateway, "alice"), "who_echo", {}, call_id=cid)
    assert body["structured"]["headers"]["authorization"] == "Bearer [redacted]"
    assert_nowhere([upstream.tokens[0]], json.dumps(body), gateway.audit_path.read_text())
