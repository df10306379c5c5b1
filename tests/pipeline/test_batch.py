"""A whole model turn through the Gateway object itself (with the shared gateway's real upstreams):
one outcome per call id, in order, and a terminate mid-batch refuses the rest."""

from __future__ import annotations

import uuid

import pytest

from gateway.pipeline import CallRequest
from gateway.policy.call import Principal

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ALICE = Principal("alice", ("admins", "staff"))


def _turn(session: str, calls: list[tuple[str, dict]]) -> list[CallRequest]:
    return [CallRequest(tool=tool, arguments=args, principal=ALICE, session_id=session, call_id=f"{session}-{i}",
                        iteration=1, frontend="batch") for i, (tool, args) in enumerate(calls)]


async def test_a_batch_gets_one_outcome_per_call_in_order(shared_gateway):
    session = f"batch-{uuid.uuid4().hex}"
    requests = _turn(session, [("up_echo", {"text": "one"}), ("up_add", {"a": 2, "b": 3}),
                               ("up_nonexistent", {}), ("up_echo", {"text": "forbidden"}),
                               ("up_echo", {"text": "rw:two"}), ("web_search", {"q": "batch"})])

    outcomes = await shared_gateway.gateway.call_batch(requests)

    assert [o.call_id for o in outcomes] == [r.call_id for r in requests]
    assert [o.decision for o in outcomes] == ["allow", "allow", "unknown_tool", "reject", "allow", "allow"]
    assert [o.is_error for o in outcomes] == [False, False, True, True, False, False]
    assert [outcomes[0].text, outcomes[1].structured, outcomes[4].text] == ["one", {"result": 5}, "rewritten rw:two"]
    assert outcomes[2].text == "Unknown tool: up_nonexistent"
    for request in requests:  # and one audit event each
        assert shared_gateway.audit_event(request.call_id)["frontend"] == "batch"


async def test_a_terminate_mid_batch_refuses_the_rest(shared_gateway, http_api):
    session = f"batch-{uuid.uuid4().hex}"
    requests = _turn(session, [("up_echo", {"text": "before"}), ("up_echo", {"text": "terminate"}),
                               ("up_echo", {"text": "after"}), ("web_search", {"q": session})])

    outcomes = await shared_gateway.gateway.call_batch(requests)

    assert [o.call_id for o in outcomes] == [r.call_id for r in requests]
    assert [o.decision for o in outcomes] == ["allow", "terminate", "terminated", "terminated"]
    assert len({o.text for o in outcomes[1:]}) == 1
    assert all(o.meta["gateway/terminated"] is True for o in outcomes[1:])
    for request in requests[2:]:
        assert shared_gateway.audit_event(request.call_id)["upstream_outcome"] == {"status": "not_called"}
    assert http_api.seen(session) == []
