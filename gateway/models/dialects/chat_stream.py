"""The agent's chat response: a whole chat completion, or the events of a streamed one (``ChatStream``).

Both carry the gateway's extension field (``EXTENSION``): the run, how many model requests were made and
what became of every tool call (gateway/models/proxy.py).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from gateway.models.dialects.base import (
    EXTENSION,
    Json,
    ModelAnswer,
    Reply,
    ToolCall,
    as_object,
    call_arguments,
    new_call_id,
    sse,
)
from gateway.models.dialects.chat_answer import StreamedMessage

__all__ = ["ChatStream", "add_usage", "completion", "final_message", "read_calls", "text_message"]

_NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


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


def read_calls(message: Json) -> tuple[Json, list[ToolCall]]:
    """The (normalised) assistant message with an id on every tool call, and its calls."""
    raw_calls = message.get("tool_calls")
    if not isinstance(raw_calls, list) or not raw_calls:
        return message, []
    calls = []
    for raw in raw_calls:
        raw = as_object(raw)
        function = as_object(raw.get("function"))
        name, call_id = function.get("name"), raw.get("id")
        arguments, refused = call_arguments(function.get("arguments"))
        calls.append(ToolCall(call_id if isinstance(call_id, str) and call_id else new_call_id(),
                              name if isinstance(name, str) else "", arguments, refused, raw))
    return {**message, "tool_calls": [{**c.raw, "id": c.id} for c in calls]}, calls


def _with_args(call: ToolCall, arguments: Json) -> Json:
    """A returned tool call, carrying the admitted (possibly rewritten) arguments."""
    function = as_object(call.raw.get("function"))
    return {**call.raw, "id": call.id, "type": "function",
            "function": {**function, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def answer_message(answer: ModelAnswer) -> Json:
    """The assistant message of one (read) answer."""
    return as_object(as_object(answer.raw["choices"][0]).get("message"))


def final_message(reply: Reply) -> tuple[Json, str]:
    """The assistant message the agent gets and its finish reason."""
    if reply.text is not None or reply.answer is None:
        return text_message(reply.text or ""), "stop"
    message = answer_message(reply.answer)
    if reply.returned:
        return {**message, "tool_calls": [_with_args(c, args) for c, args in reply.returned]}, "tool_calls"
    return message, reply.answer.finish


def completion(reply: Reply) -> Json:
    """The whole chat completion: the model's last answer's id and model, else new ones."""
    message, finish = final_message(reply)
    base = reply.answer.raw if reply.answer is not None else {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": reply.model}
    return {**base, "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": reply.usage or _NO_USAGE, EXTENSION: reply.extension}


class ChatStream:
    """One streamed chat completion: text at once, tool calls once decided (gateway/models/dialects/base.py)."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.head: Json = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                           "created": int(time.time()), "model": model}
        self.include_usage = include_usage
        self._streamed = StreamedMessage()
        self._finish = "stop"
        self._usage: Json | None = None

    def turn(self) -> None:
        """A model request starts."""
        self._streamed = StreamedMessage()
        self._finish = "stop"
        self._usage = None

    def _chunk(self, delta: Json, finish: str | None = None, **extra: Any) -> bytes:
        return sse({**self.head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                              "logprobs": None}], **extra})

    def add(self, event: Json) -> list[bytes]:
        """One upstream chunk; text deltas stream through at once."""
        self.head.update({k: event[k] for k in ("id", "created", "model", "system_fingerprint") if k in event})
        self._usage = add_usage(self._usage, event.get("usage"))
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []
        if choices[0].get("finish_reason"):
            self._finish = str(choices[0]["finish_reason"])
        passed = self._streamed.add(as_object(choices[0].get("delta")))
        return [self._chunk(passed)] if passed else []

    def answer(self) -> ModelAnswer:
        """The turn's assistant message, read as a whole answer is."""
        message, calls = read_calls(self._streamed.message())
        raw = {"choices": [{"index": 0, "message": message, "finish_reason": self._finish}]}
        return ModelAnswer(raw, calls, self._finish, self._usage)

    def close(self, reply: Reply) -> list[bytes]:
        """What is still to say (decided tool calls, a final text), the finish, usage, [DONE]."""
        message, finish = final_message(reply)
        said = "".join(self._streamed.text)
        events = []
        delta: Json = {}
        content = message.get("content")
        if isinstance(content, str) and content and content != (said or None):
            delta["content"] = content
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        if delta:
            events.append(self._chunk({"role": "assistant", **delta}))
        events.append(self._chunk({}, finish, **{EXTENSION: reply.extension}))
        if self.include_usage:
            events.append(sse({**self.head, "choices": [], "usage": reply.usage or _NO_USAGE}))
        events.append(b"data: [DONE]\n\n")
        return events

    def error(self, code: str, message: str) -> bytes:
        """The event that ends a stream whose upstream failed midway."""
        return sse({"error": {"code": code, "message": message}})
