"""The agent's response: a whole chat completion, or the closing events of a streamed one.

Both carry the gateway's extension field (``EXTENSION``): the run, how many model requests were made and
what became of every tool call (gateway/models/proxy.py).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

__all__ = ["EXTENSION", "add_usage", "closing", "completion", "sse_event", "text_message"]

Json = dict[str, Any]

EXTENSION = "gateway"  # the response's extension field: what the gateway resolved


def text_message(text: str) -> Json:
    """An assistant message of text alone."""
    return {"role": "assistant", "content": text}


def add_usage(total: Json | None, usage: Any) -> Json | None:
    """Token counts summed over every model request of one agent request."""
    if not isinstance(usage, dict):
        return total
    out = dict(total or {})
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if isinstance(usage.get(key), int):
            out[key] = out.get(key, 0) + usage[key]
    return out


def completion(model: str, extension: Json, message: Json, finish: str, usage: Json | None,
               answer: Json | None = None) -> Json:
    """The whole chat completion: ``answer``'s (the model's last) id and model, else new ones."""
    base = answer or {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                      "model": model}
    return {**base, "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            EXTENSION: extension}


def sse_event(data: Json) -> bytes:
    """One Server-Sent Event of JSON data."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def closing(head: Json, extension: Json, message: Json, finish: str, usage: Json | None,
            include_usage: bool) -> list[bytes]:
    """The last events of a stream: what is still to say (decided tool calls, a final text), the finish, [DONE]."""
    events = []
    delta: Json = {}
    if isinstance(message.get("content"), str) and message["content"]:
        delta["content"] = message["content"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
    if delta:
        events.append(sse_event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", **delta},
                                                   "finish_reason": None, "logprobs": None}]}))
    events.append(sse_event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish, "logprobs": None}],
                          EXTENSION: extension}))
    if include_usage:
        events.append(sse_event({**head, "choices": [],
                              "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}))
    events.append(b"data: [DONE]\n\n")
    return events
