"""Two identity providers whose tokens both say ``sub: alice``, end to end: two people who share nothing, and
a decision log that names each by issuer, subject and token id hash, never by the token.

Issuer A is the real OpenID Provider of the tests (``idp``: a real authorization code + PKCE flow through its
dev login). Issuer B is tests/two_issuers_support.py's: RSA keys made there, served as a JWKS with discovery
on loopback, signing access tokens the way an IdP does (``typ: at+jwt``, ``aud`` the gateway's resource). The
gateway is served from its config (``auth.jwt`` lists both, API keys stay beside them) and called over real HTTP.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from raw_mcp import MCP_HEADERS, RawMcp, message_of
from two_issuers_support import alices, claims_of, two_issuers_auth

from gateway.policy.load import load_policy_set
from gateway.testing.replay import read_events, replay

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

POLICY = """
policy: budget
rules:
  - id: session-budget
    when: session.calls >= 2
    action: reject
    message: This run has used its budget of 2 calls.
  - id: only-issuer-a-writes
    when: principal.kind == "jwt" && principal.issuer != env.issuer_a && !tool.annotations.readOnlyHint
    action: reject
    message: Only issuer A's people may write.
"""


@pytest_asyncio.fixture(loop_scope="session")
async def two_issuers(idp, second_issuer, start_gateway, configs, http_api):
    """(gateway, alice's token from A, alice's token from B, issuer B)."""
    second = second_issuer
    auth = two_issuers_auth(idp, second, configs.api_keys("alice", "bob"))
    config = configs.base(configs.http_upstream("api", http_api.url), auth=auth,
                          env={"stage": "test", "issuer_a": idp.issuer})
    gateway = await start_gateway(config, {"p.yaml": POLICY})
    token_a, token_b = await alices(idp, second)
    return gateway, token_a, token_b, second


async def _invoke(gateway: Any, token: str, tool: str, session: str, **arguments: Any) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30)) as client:
        return await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments, "session_id": session,
                                                                    "call_id": f"c-{uuid.uuid4().hex}"})


async def _decision(gateway: Any, token: str, session: str, i: int) -> str:
    decision: str = (await _invoke(gateway, token, "api_get_item", session, item_id=f"i{i}")).json()["decision"]
    return decision


async def test_one_issuers_alice_cannot_use_the_others_mcp_session(two_issuers):
    gateway, token_a, token_b, _ = two_issuers
    async with RawMcp.open(gateway.url, token_a) as alice_a:
        async with httpx2.AsyncClient(base_url=gateway.url, headers={
                **MCP_HEADERS, "Authorization": f"Bearer {token_b}", "Mcp-Session-Id": alice_a.session_id}) as b:
            listing = await b.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
            delete = await b.delete("/mcp")
        own = await alice_a.send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}).encode())
    assert (listing.status_code, delete.status_code) == (404, 404)
    assert message_of(listing)["error"]["message"] == "Session not found"
    assert own.status_code == 200 and "result" in message_of(own)


async def test_two_issuers_alices_keep_their_runs_and_see_their_issuer(two_issuers):
    gateway, token_a, token_b, second = two_issuers
    shared = f"s-{uuid.uuid4().hex}"
    a = [await _decision(gateway, token_a, shared, i) for i in range(3)]
    b = [await _decision(gateway, token_b, shared, i) for i in range(2)]
    assert a == ["allow", "allow", "reject"] and b == ["allow", "allow"]
    write_b = await _invoke(gateway, token_b, "api_create_item", f"s-{uuid.uuid4().hex}", name="x")
    write_a = await _invoke(gateway, token_a, "api_create_item", f"s-{uuid.uuid4().hex}", name="y")
    assert write_b.json()["content"][0]["text"] == "Only issuer A's people may write."
    assert write_a.json()["decision"] == "allow"

    events = [e for e in gateway.audit_events() if e.get("event") == "call.outcome" and e["session"] == shared]
    by_issuer = {e["principal"]["issuer"]: e["principal"] for e in events}
    for issuer, token in ((gateway.config.spec.env["issuer_a"], token_a), (second.issuer, token_b)):
        assert by_issuer[issuer] == {
            "id": "alice", "groups": by_issuer[issuer]["groups"], "kind": "jwt", "issuer": issuer,
            "subject": "alice", "token_id_hash": hashlib.sha256(claims_of(token)["jti"].encode()).hexdigest()}


async def test_no_token_reaches_the_decision_log_the_logs_or_the_store(two_issuers, caplog, capfd):
    gateway, token_a, token_b, _ = two_issuers
    caplog.set_level(logging.DEBUG)
    for token in (token_a, token_b):
        assert (await _invoke(gateway, token, "api_get_item", f"s-{uuid.uuid4().hex}", item_id="hi")).status_code == 200
        async with RawMcp.open(gateway.url, token) as session:
            await session.call_tool("api_get_item", '{"item_id": "over-mcp"}', f"c-{uuid.uuid4().hex}")
        refused = await _invoke(gateway, token[:-4] + "AAAA", "api_get_item", "s", item_id="tampered")
        assert refused.status_code == 401 and token[:-4] not in refused.text
    await gateway.gateway.store.flushed()

    data = Path(gateway.root) / "data"
    stored = b"".join(p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file())
    logged = "\n".join(f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in caplog.records)
    out, err = capfd.readouterr()
    assert gateway.audit_events(), "nothing was audited"
    for token in (token_a, token_b):
        header, payload, signature = token.split(".")
        for part in (token, f"{header}.{payload}", signature):
            assert part.encode() not in stored, "a token is in the audit log or the store"
            assert part not in logged and part not in out and part not in err, "a token was logged"


async def test_replay_decides_the_logged_calls_by_their_issuer(two_issuers, tmp_path):
    gateway, token_a, token_b, second = two_issuers
    for token in (token_a, token_b):
        assert (await _invoke(gateway, token, "api_get_item", f"s-{uuid.uuid4().hex}", item_id="r")).status_code == 200
    stricter = tmp_path / "stricter"
    stricter.mkdir()
    (stricter / "p.yaml").write_text(POLICY + f"""  - id: not-issuer-b
    when: principal.kind == "jwt" && principal.issuer == "{second.issuer}"
    action: reject
    message: Not issuer B.
""")
    report = replay(load_policy_set([stricter]), read_events(gateway.audit_path), dict(gateway.config.spec.env))
    changed = [c for c in report.changes.values() if c.kind == "decision"]
    assert [(c.was, c.now, c.now_by, c.count) for c in changed] == [("allow", "reject", "budget/not-issuer-b", 1)]
    assert report.unchanged == 1  # issuer A's alice, decided alike
