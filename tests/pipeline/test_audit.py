"""The decision log: an intent line before a tool runs and one outcome line per call, with the
documented fields, secrets redacted, and a call that cannot be recorded fails closed."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from gateway.pipeline.lifecycle import AUDIT_FAILED

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

DOCUMENTED = {"id", "time", "call_id", "principal", "session", "tool", "original_args", "final_args", "rules",
              "verdict", "upstream_outcome", "latency", "revision", "redacted"}


async def test_one_event_per_call_with_the_documented_fields(shared_gateway, mcp_alice, call_id):
    before = len(shared_gateway.audit_events())
    cid, other_ids = call_id(), [call_id(), call_id()]
    result = await mcp_alice.call("up_echo", {"text": "pw-test", "password": "hunter2"}, call_id=cid)
    for other in other_ids:
        await mcp_alice.call("up_echo", {"text": "forbidden"}, call_id=other)

    assert (result.is_error, result.content[0].text) == (False, "pw-test")
    new = shared_gateway.audit_events()[before:]
    # the call that ran: an intent, then its outcome; the two refused ones: an outcome each
    assert [(e["event"], e["call_id"]) for e in new] == [
        ("call.intent", cid), ("call.outcome", cid), ("call.outcome", other_ids[0]), ("call.outcome", other_ids[1])]
    intent, event = new[0], shared_gateway.audit_event(cid)
    assert intent["id"] == event["id"]
    assert intent["final_args"] == {"text": "pw-test"}  # what the tool was about to receive
    assert (intent["verdict"], intent["rewritten"], intent["redacted"]) == ("allow", True, [])
    assert (intent["principal"], intent["session"], intent["tool"], intent["upstream"], intent["revision"]) == (
        event["principal"], event["session"], "up_echo", "up", event["revision"])
    assert intent["time"] <= event["time"]
    assert DOCUMENTED <= event.keys()
    assert re.fullmatch(r"[0-9a-f]{32}", event["id"])
    assert datetime.fromisoformat(event["time"].replace("Z", "+00:00")).tzinfo is not None
    assert event["call_id"] == cid
    assert event["principal"] == {"id": "alice", "groups": ["admins", "staff"], "kind": "key"}
    assert event["session"].startswith("implicit-")  # no run id named: the MCP session is not one (docs/runs.md)
    assert (event["tool"], event["upstream"], event["frontend"]) == ("up_echo", "up", "mcp")
    assert event["original_args"] == {"text": "pw-test", "password": "[REDACTED]"}
    assert event["final_args"] == {"text": "pw-test"}  # the strip-password rewrite removed it
    assert event["redacted"] == ["/original_args/password"]
    fired = [(r["rule"], r["stage"]) for r in event["rules"] if r["outcome"] == "fired"]
    assert fired == [("main/strip-password", "request")]
    assert {r["rule"] for r in event["rules"]} >= {"main/no-forbidden-echo", "main/end-session"}
    assert event["verdict"] == "allow"
    assert event["upstream_outcome"] == {"status": "ok", "is_error": False}
    latency = event["latency"]
    assert latency["policy_us"] > 0
    assert 0 < latency["upstream_ms"] <= latency["total_ms"]
    assert event["revision"] == shared_gateway.gateway.policies.current.revision
    assert "hunter2" not in shared_gateway.audit_path.read_text()

    refused = shared_gateway.audit_event(other_ids[0])
    assert (refused["verdict"], refused["message"], refused["latency"]["upstream_ms"]) == (
        "reject", "Echoing that word is not allowed.", None)


async def test_a_call_whose_event_cannot_be_written_fails_closed(start_gateway, configs, http_api, rest, rest_call,
                                                                 connect_mcp):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)),
                                  {"p.yaml": "policy: p\nrules: []\n"})
    gateway.audit_path.mkdir(parents=True)  # a directory where the log file should be: every write fails

    body = await rest_call(rest(gateway), "api_search", {"q": "audit-down"})
    assert (body["_status"], body["decision"], body["is_error"]) == (200, "audit_failed", True)
    assert body["content"] == [{"type": "text", "text": AUDIT_FAILED}]
    async with connect_mcp(gateway, "alice") as conn:
        result = await conn.call("api_search", {"q": "audit-down-mcp"})
    assert (result.is_error, [b.text for b in result.content]) == (True, [AUDIT_FAILED])
    assert result.meta["gateway/decision"] == "audit_failed"

    gateway.audit_path.rmdir()  # the log is writable again: calls go through and are recorded
    body = await rest_call(rest(gateway), "api_search", {"q": "audit-back"}, call_id="audit-back-1")
    assert (body["decision"], body["is_error"]) == ("allow", False)
    assert gateway.audit_event("audit-back-1")["final_args"] == {"q": "audit-back"}


async def test_a_call_that_cannot_be_recorded_does_not_reach_the_upstream(start_gateway, configs, http_api, rest,
                                                                         rest_call):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)),
                                  {"p.yaml": "policy: p\nrules: []\n"})
    gateway.audit_path.mkdir(parents=True)

    body = await rest_call(rest(gateway), "api_create_item", {"name": "unrecorded-order-1"})

    assert body["decision"] == "audit_failed"
    assert http_api.seen("unrecorded-order-1") == []

