"""The head of every audit event: event, id, time, trace_id, in that order, first in the line."""

from __future__ import annotations

from gateway.core.audit_head import audit_head
from gateway.pipeline.audit_encode import encode_event


def test_the_head_is_the_four_fields_in_order_and_leads_the_encoded_line():
    head = audit_head("call.outcome", "2026-12-01T00:00:00.000Z", "4bf92f3577b34da6a3ce929d0e0e4736", "abc")
    assert list(head) == ["event", "id", "time", "trace_id"]
    line = encode_event({**head, "call_id": "c-1"}, 10_000, 100_000)
    assert line == (b'{"event":"call.outcome","id":"abc","time":"2026-12-01T00:00:00.000Z",'
                    b'"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","call_id":"c-1"}\n')


def test_an_event_without_a_trace_says_null_and_gets_a_fresh_id():
    first, second = (audit_head("policy.reload", "t", None) for _ in range(2))
    assert first["trace_id"] is None and second["trace_id"] is None
    assert len(first["id"]) == 32 and first["id"] != second["id"]
