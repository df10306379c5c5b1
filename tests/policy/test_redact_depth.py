"""A policy's `redact` rewrite reaches every level of a value: a secret nested past the old 64-level
limit is replaced too, in a request's arguments and in a tool's result, on both engines."""

from __future__ import annotations

from typing import Any

from gateway.policy import Verdict

DEPTH = 200

POLICY = r"""
policy: p
rules:
  - id: scrub-request
    action: rewrite
    rewrite: {redact: ['sk-\w+']}
  - id: scrub-response
    stage: response
    action: rewrite
    rewrite: {redact: ['sk-\w+']}
"""


def buried(secret: str) -> dict[str, Any]:
    value: Any = {"key": secret}
    for level in range(DEPTH):
        value = [value] if level % 2 else {"next": value}
    return {"deep": value}


def dig(value: Any) -> Any:
    while isinstance(value, (dict, list)) and "key" not in value:
        value = value[0] if isinstance(value, list) else next(iter(value.values()))
    return value["key"]


def test_redact_rewrites_reach_any_depth(load: Any, decide: Any) -> None:
    ps = load(POLICY)
    request = decide(ps, "t", buried("sk-live123"))
    assert request.verdict is Verdict.ALLOW, request.rules
    assert dig(request.args) == "[REDACTED]"

    response = decide(ps, "t", {}, stage="response", result={"text": "ok", "structured": buried("sk-live456")})
    assert response.verdict is Verdict.ALLOW, response.rules
    assert dig(response.result["structured"]) == "[REDACTED]"
