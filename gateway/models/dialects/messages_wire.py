"""The Messages API's wire shapes shared by the whole and the streamed response: a ``Message`` read, a text
message, usage summed in the API's keys, the error types the Anthropic SDK maps by status."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import Json, ModelAnswer, ToolCall, new_call_id

__all__ = ["add_usage", "error_body", "error_type", "read_message", "text_message", "with_counts"]

# Blocks of calls the upstream makes itself to tools the gateway cannot see (the MCP connector, refused in
# requests): an answer holding one is refused rather than passed on.
_RUN_UPSTREAM = ("mcp_tool_use", "mcp_tool_result")
_COUNTS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")

# The error ``type`` the Anthropic SDK maps to its exception classes, by status.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    """The Messages API's error type for an HTTP status."""
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def add_usage(total: Json | None, usage: Any) -> Json | None:
    """Token counts summed over model requests: every count the API reports, in its own keys."""
    if not isinstance(usage, dict):
        return total
    out = dict(total or {})
    for key in _COUNTS:
        if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool):
            out[key] = out.get(key, 0) + usage[key]
    return out


def with_counts(usage: Json | None) -> Json:
    """Usage as a ``Message`` carries it: input and output tokens always there."""
    return {"input_tokens": 0, "output_tokens": 0, **(usage or {})}


def text_message(model: str, text: str, usage: Json | None, answer: Json | None = None) -> Json:
    """An assistant message of text alone (the answer's id and model when there was one)."""
    base = answer or {}
    return {"id": base.get("id") or f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": base.get("model") or model, "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None, "usage": with_counts(usage)}


def _read_call(block: Json) -> ToolCall:
    """One ``tool_use`` block as a tool call; the block gets an id when it had none."""
    if not isinstance(block.get("id"), str) or not block["id"]:
        block["id"] = new_call_id()
    name = block.get("name")
    value = block.get("input", {})
    arguments, refused = (value, None) if isinstance(value, dict) else ({}, "the input is not a JSON object")
    return ToolCall(block["id"], name if isinstance(name, str) else "", arguments, refused, block)


def read_message(answer: Json) -> ModelAnswer:
    """A whole ``Message``; ``ModelUpstreamError`` when its content could hide a call."""
    content = answer.get("content")
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise ModelUpstreamError("the model upstream's answer is not a Message: its 'content' is not a list of "
                                 "content blocks")
    blocks = [dict(b) for b in content]
    hidden = next((b["type"] for b in blocks if b.get("type") in _RUN_UPSTREAM), None)
    if hidden is not None:
        raise ModelUpstreamError(f"the model upstream's answer holds a {hidden!r} block: a tool call the upstream "
                                 "made itself, which no policy decided")
    calls = [_read_call(b) for b in blocks if b.get("type") == "tool_use"]
    for call in calls:  # an input that is not an object never goes back to the model as it was
        if call.refused is not None:
            call.raw["input"] = {}
    stop = answer.get("stop_reason")
    usage = answer.get("usage")
    return ModelAnswer({**answer, "content": blocks}, calls, stop if isinstance(stop, str) else "end_turn",
                       usage if isinstance(usage, dict) else None)


def error_body(status: int, code: str, message: str) -> Json:
    """``{"type": "error", "error": {"type", "message", "code"}}``: the type the SDK maps by status."""
    return {"type": "error", "error": {"type": error_type(status), "message": message, "code": code}}
