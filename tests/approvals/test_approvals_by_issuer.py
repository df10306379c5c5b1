"""Approval requests are bound to (issuer, subject): one issuer's ``sub: alice`` never sees, claims or decides
the other's. A stored request keeps the principal's kind, issuer and subject; a row written before them
reads back as an API key's, bound as it was.

The real ``ApprovalService`` on a real SQLite store, and the approver API served on loopback behind
``RequireIdentity`` with identities whose principals were recognised by a token.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.middleware import Middleware

from gateway.approvals.service import ApprovalService
from gateway.auth.keys import Authenticator, Identity, hash_key
from gateway.core.errors import ApprovalForbidden
from gateway.frontends.approvals_api import approval_routes
from gateway.frontends.identity import RequireIdentity
from gateway.pipeline.approvals import HeldCall
from gateway.pipeline.request import CallRequest
from gateway.policy.call import Principal, ToolInfo
from gateway.policy.decision import ApprovalRequirement, Decision, Stage, Verdict
from gateway.upstreams.base import UpstreamTool
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.registry import ExposedTool

ISSUER_A, ISSUER_B = "https://idp-a.example.com", "https://idp-b.example.com"
ALICE_A = Principal("alice", ("eng",), {}, "jwt", ISSUER_A, "alice", "a" * 64)
ALICE_B = Principal("alice", ("eng",), {}, "jwt", ISSUER_B, "alice", "b" * 64)
DAVE_B = Principal("dave", ("managers",), {}, "jwt", ISSUER_B, "dave")
ARGS = {"service": "billing"}
TOOL = ExposedTool("deploy", HttpUpstream("ops", "http://127.0.0.1:9", []), UpstreamTool("deploy"),
                   ToolInfo("deploy", "ops"), None)
DECISION = Decision(Verdict.APPROVE, Stage.REQUEST, dict(ARGS), dict(ARGS), "r1", message="Deploys need a human",
                    decided_by="deploys", approvals=[ApprovalRequirement(
                        "deploys", "Deploys need a human", ("group:managers", "group:eng"), 600.0, Verdict.REJECT,
                        "page")])
KEYS = {"alice-a": Identity(ALICE_A, approver=True), "alice-b": Identity(ALICE_B, approver=True),
        "dave-b": Identity(DAVE_B, approver=True)}


def held(principal: Principal, call_id: str = "call-1") -> HeldCall:
    """The same call (same call id, tool and arguments) made by ``principal``."""
    return HeldCall(CallRequest("deploy", dict(ARGS), principal, "run-1", call_id=call_id, wait_seconds=0),
                    TOOL, DECISION)


async def test_the_same_call_by_two_issuers_alices_makes_two_requests(approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked_a = await service.hold(held(ALICE_A))
    asked_b = await service.hold(held(ALICE_B))
    assert asked_a.pending and asked_b.pending and asked_a.approval_id != asked_b.approval_id

    await service.decide(str(asked_a.approval_id), DAVE_B, True)
    again_b = await service.hold(held(ALICE_B))  # the other alice cannot run on this approval
    assert (again_b.approved, again_b.pending, again_b.approval_id) == (False, True, asked_b.approval_id)
    runs_a = await service.hold(held(ALICE_A))  # the alice who asked may
    assert runs_a.approved and runs_a.approval_id == asked_a.approval_id


async def test_neither_alice_may_approve_a_request_of_an_alice(approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked = await service.hold(held(ALICE_A))
    for approver in (ALICE_A, ALICE_B):  # herself, and one the page would show by the same name
        try:
            await service.decide(str(asked.approval_id), approver, True)
        except ApprovalForbidden as exc:
            assert "your own call" in str(exc)
        else:
            raise AssertionError(f"{approver.key} approved alice's call")


async def test_a_stored_request_keeps_kind_issuer_and_subject_and_old_rows_read_as_keys(approval_desk: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked = await service.hold(held(ALICE_A))
    stored = await service.get(str(asked.approval_id))
    assert stored is not None and stored.principal == ALICE_A and stored.principal.key == ALICE_A.key
    with sqlite3.connect(approval_desk.sqlite.path) as db:
        column, data = db.execute("SELECT principal, data FROM approvals WHERE id = ?",
                                  (asked.approval_id,)).fetchone()
        assert column == ALICE_A.key
        assert {k: json.loads(data)["principal"][k] for k in ("kind", "issuer", "subject")} == {
            "kind": "jwt", "issuer": ISSUER_A, "subject": "alice"}

    old = await service.hold(held(Principal("legacy", ("eng",)), call_id="call-old"))
    with sqlite3.connect(approval_desk.sqlite.path) as db:  # as a row written before principals had a kind
        (data,) = db.execute("SELECT data FROM approvals WHERE id = ?", (old.approval_id,)).fetchone()
        row = json.loads(data)
        row["principal"] = {"id": "legacy", "groups": ["eng"], "claims": {}}
        db.execute("UPDATE approvals SET data = ? WHERE id = ?", (json.dumps(row), old.approval_id))
    legacy = await service.get(str(old.approval_id))
    assert legacy is not None and (legacy.principal.kind, legacy.principal.key) == ("key", "legacy")
    retry = await service.hold(held(Principal("legacy", ("eng",)), call_id="call-old"))
    assert retry.approval_id == old.approval_id  # still bound to the key principal that asked


async def test_one_issuers_alice_cannot_read_the_others_request(approval_desk: Any, serve: Any) -> None:
    service: ApprovalService = approval_desk.service
    asked = await service.hold(held(ALICE_A))
    auth = Authenticator([(hash_key(key), identity) for key, identity in KEYS.items()])
    # plain callers (not approvers) read only their own requests: the alices are not approvers here
    callers = Authenticator([(hash_key(key), Identity(identity.principal)) for key, identity in KEYS.items()])
    url = await serve(Starlette(routes=approval_routes(service),
                                middleware=[Middleware(RequireIdentity, auth=callers)]))
    approvers = await serve(Starlette(routes=approval_routes(service),
                                      middleware=[Middleware(RequireIdentity, auth=auth)]))

    async def get(base: str, key: str) -> httpx2.Response:
        async with httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
            return await client.get(f"/v1/approvals/{asked.approval_id}")

    own, other = await get(url, "alice-a"), await get(url, "alice-b")
    assert own.status_code == 200 and other.status_code == 404
    assert own.json()["principal"] == {"id": "alice", "groups": ["eng"], "kind": "jwt", "issuer": ISSUER_A,
                                       "subject": "alice", "token_id_hash": "a" * 64}
    async with httpx2.AsyncClient(base_url=approvers, headers={"Authorization": "Bearer alice-b"}) as client:
        decided = await client.post(f"/v1/approvals/{asked.approval_id}/decision", json={"approve": True})
    assert decided.status_code == 403  # an alice may see it as an approver of group eng, but not approve it
    assert (await service.get(str(asked.approval_id))).state.value == "pending"  # type: ignore[union-attr]
