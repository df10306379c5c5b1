"""The call a frontend hands in: the caller's token it carries for the upstream step shows in no repr."""

from __future__ import annotations

from gateway.models.proxy import Caller
from gateway.pipeline.request import CallRequest
from gateway.pipeline.runs import Run
from gateway.policy.call import Principal

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"


def test_the_callers_token_is_in_no_repr_and_no_comparison():
    principal = Principal("alice", kind="jwt", issuer="https://idp.example.com", subject="alice")
    request = CallRequest("tool", {}, principal, "run-1", call_id="c1", caller_token=TOKEN)
    assert request.caller_token == TOKEN
    assert TOKEN not in repr(request) and TOKEN not in str(request)
    assert request == CallRequest("tool", {}, principal, "run-1", call_id="c1", received_ts=request.received_ts)
    caller = Caller(principal, Run("run-1", None), TOKEN)
    assert TOKEN not in repr(caller)
