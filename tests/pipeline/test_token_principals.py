"""Principals recognised by a token are bound to (issuer, subject): two issuers' ``sub: alice`` share nothing.

The two alices have the same id, groups and subject; only their issuer differs. Each test makes the
same calls as both, through ``Gateway.call`` of a gateway served from its config, and checks that runs,
session counters, termination and usage windows never cross from one to the other. An API key principal
whose id is a token's would-be binding key cannot be configured (tests/config/test_config_load.py).
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx2
import pytest

from gateway.auth.keys import hash_key
from gateway.pipeline.request import CallRequest
from gateway.policy.call import Principal

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ISSUER_A, ISSUER_B = "https://idp-a.example.com", "https://idp-b.example.com"
ALICE_A = Principal("alice", ("eng",), {}, "jwt", ISSUER_A, "alice", "0" * 64)
ALICE_B = Principal("alice", ("eng",), {}, "jwt", ISSUER_B, "alice", "1" * 64)
# An API key principal whose id is alice-A's subject: a third person again.
ALICE_KEY = Principal("alice", ("eng",))

POLICY = """
policy: budget
rules:
  - id: stop-word
    when: args.q == "stop"
    action: terminate
    message: Session ended by policy.
  - id: session-budget
    when: session.calls >= 2
    action: reject
    message: This session has used its budget of 2 calls.
  - id: hourly-budget
    when: usage.hour.calls >= 3
    action: reject
    message: This principal has used its 3 calls this hour.
"""


ADMIN_KEY = "token-principals-admin-key"


def _config(configs, http_api):
    keys = [*configs.api_keys("alice"), {"principal": {"id": "root"}, "sha256": hash_key(ADMIN_KEY), "admin": True}]
    return configs.base(configs.http_upstream("api", http_api.url), usage_windows={"hour": "1h"},
                        auth={"api_keys": keys})


async def _search(gateway, principal: Principal, q: str, session: str) -> str:
    outcome = await gateway.gateway.call(CallRequest("api_search", {"q": q}, principal, session, frontend="rest"))
    decision: str = outcome.decision
    return decision


async def test_two_issuers_subjects_keep_their_own_session_counters(start_gateway, configs, http_api):
    gateway = await start_gateway(_config(configs, http_api), {"p.yaml": POLICY})
    shared = f"s-{uuid.uuid4().hex}"
    a = [await _search(gateway, ALICE_A, f"q{i}", shared) for i in range(3)]
    b = [await _search(gateway, ALICE_B, f"q{i}", shared) for i in range(2)]
    key = [await _search(gateway, ALICE_KEY, f"q{i}", shared) for i in range(2)]

    assert a == ["allow", "allow", "reject"]
    assert b == ["allow", "allow"]  # her own budget, not the rest of the other alice's
    assert key == ["allow", "allow"]
    store = gateway.gateway.store
    await store.flushed()
    rows = {(s.principal, s.calls) for s in (await store.run(store.list_sessions, None, None, None, 100, 0))[0]
            if s.id == shared}
    assert rows == {(ALICE_A.key, 3), (ALICE_B.key, 2), ("alice", 2)}


async def test_one_issuers_subject_cannot_terminate_the_others_session(start_gateway, configs, http_api):
    gateway = await start_gateway(_config(configs, http_api), {"p.yaml": POLICY})
    shared = f"s-{uuid.uuid4().hex}"
    assert await _search(gateway, ALICE_A, "stop", shared) == "terminate"
    assert await _search(gateway, ALICE_A, "hello", shared) == "terminated"
    assert await _search(gateway, ALICE_B, "hello", shared) == "allow"  # never touched


async def test_two_issuers_subjects_keep_their_own_usage_windows(start_gateway, configs, http_api):
    gateway = await start_gateway(_config(configs, http_api), {"p.yaml": POLICY})
    a = [await _search(gateway, ALICE_A, "q", f"s-{uuid.uuid4().hex}") for _ in range(4)]
    b = [await _search(gateway, ALICE_B, "q", f"s-{uuid.uuid4().hex}") for _ in range(3)]
    assert a == ["allow", "allow", "allow", "reject"]  # across her runs: the hourly budget
    assert b == ["allow", "allow", "allow"]


async def test_two_issuers_subjects_get_their_own_implicit_runs(start_gateway, configs, http_api):
    gateway = await start_gateway(_config(configs, http_api), {"p.yaml": POLICY})
    pipeline = gateway.gateway
    run_a = await pipeline.resolve_run(ALICE_A.key, None, "client-1")
    run_b = await pipeline.resolve_run(ALICE_B.key, None, "client-1")
    assert await _search(gateway, ALICE_A, "stop", run_a.id) == "terminate"
    # the other alice's run of the same client is another run, alive, whatever its id
    assert await pipeline.run_ended(ALICE_B.key, run_b, "ended") is None
    assert await pipeline.run_ended(ALICE_A.key, run_a, "ended") is not None
    assert await _search(gateway, ALICE_B, "hello", run_b.id) == "allow"


async def test_an_admin_names_one_issuers_alices_run_by_her_binding_key(start_gateway, configs, http_api):
    gateway = await start_gateway(_config(configs, http_api), {"p.yaml": POLICY})
    shared = f"s-{uuid.uuid4().hex}"
    assert [await _search(gateway, p, "q", shared) for p in (ALICE_A, ALICE_B)] == ["allow", "allow"]
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                                  timeout=httpx2.Timeout(30)) as admin:
        listed = await admin.get("/v1/admin/sessions", params={"principal": ALICE_A.key})
        # as `gateway sessions end` names it: each part percent-encoded whole
        ended = await admin.post(f"/v1/admin/sessions/{quote(ALICE_A.key, safe='')}/{shared}/end",
                                 json={"message": "ended by an admin"})
    assert [(s["principal"], s["id"]) for s in listed.json()["sessions"]] == [(ALICE_A.key, shared)]
    assert ended.status_code == 200, ended.text
    assert (ended.json()["principal"], ended.json()["terminated"]) == (ALICE_A.key, True)
    assert await _search(gateway, ALICE_A, "q", shared) == "terminated"
    assert await _search(gateway, ALICE_B, "q", shared) == "allow"
