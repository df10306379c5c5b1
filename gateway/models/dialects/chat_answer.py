"""The chat model's assistant message as the proxy decides it: read whole, or assembled from streamed deltas.

Every tool call the model makes must reach the policies, so the shapes that could carry one past them
are settled here, once, for both paths:

- ``tool_calls`` must be a list (or absent): anything else is a bad upstream answer (502);
- a legacy ``function_call`` (the pre-``tools`` API, still sent by some servers) is read as one tool call
  of that function, so every action applies to it, and the agent gets it as ``tool_calls``, the shape it
  asked for; one beside ``tool_calls`` is a bad upstream answer.

Streamed text and arguments are kept as lists of pieces and joined once: linear in what was streamed.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import Json, as_object, new_call_id

__all__ = ["StreamedMessage", "assistant_message"]

_LEGACY = "function_call"


def assistant_message(message: Json) -> Json:
    """The model's message with every tool call it makes in ``tool_calls`` (see the module docstring)."""
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise ModelUpstreamError("the model upstream's answer is not a chat completion: its 'tool_calls' is a "
                                 f"{type(calls).__name__}, not a list")
    legacy = message.get(_LEGACY)
    if legacy is None:
        return message
    if not isinstance(legacy, dict):
        raise ModelUpstreamError(f"the model upstream's answer is not a chat completion: its '{_LEGACY}' is not "
                                 "an object")
    if calls:
        raise ModelUpstreamError(f"the model upstream's answer holds both 'tool_calls' and a legacy '{_LEGACY}'")
    read = {k: v for k, v in message.items() if k != _LEGACY}
    return {**read, "tool_calls": [{"id": new_call_id(), "type": "function", "function": legacy}]}


class _Pieces:
    """One tool call being streamed: its id, and the pieces of its name and arguments."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: Any = None
        self.name: list[str] = []
        self.arguments: list[str] = []

    def add(self, delta: Json) -> None:
        if delta.get("id"):
            self.id = delta["id"]
        function = as_object(delta.get("function"))
        if isinstance(function.get("name"), str):
            self.name.append(function["name"])
        if isinstance(function.get("arguments"), str):
            self.arguments.append(function["arguments"])

    def whole(self) -> Json:
        return {"id": self.id, "type": "function",
                "function": {"name": "".join(self.name), "arguments": "".join(self.arguments)}}


class StreamedMessage:
    """The assistant message of one streamed turn, assembled delta by delta."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self._calls: dict[int, _Pieces] = {}
        self._legacy: _Pieces | None = None

    def add(self, delta: Json) -> Json:
        """Take one delta; returns what streams through to the agent at once (text, never a tool call)."""
        calls = delta.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise ModelUpstreamError("the model upstream streamed a 'tool_calls' that is not a list")
        for piece in calls or ():
            if isinstance(piece, dict):
                index = piece["index"] if isinstance(piece.get("index"), int) else len(self._calls)
                self._calls.setdefault(index, _Pieces()).add(piece)
        legacy = delta.get(_LEGACY)
        if legacy is not None:
            if not isinstance(legacy, dict):
                raise ModelUpstreamError(f"the model upstream streamed a '{_LEGACY}' that is not an object")
            self._legacy = self._legacy or _Pieces()
            self._legacy.add({"function": legacy})
        passed = {k: v for k, v in delta.items() if k not in ("tool_calls", _LEGACY)}
        if isinstance(passed.get("content"), str):
            self.text.append(passed["content"])
        return passed

    def message(self) -> Json:
        """The whole assistant message, read as ``assistant_message`` reads a whole answer."""
        message: Json = {"role": "assistant", "content": "".join(self.text) or None}
        if self._calls:
            message["tool_calls"] = [self._calls[i].whole() for i in sorted(self._calls)]
        if self._legacy is not None:
            message[_LEGACY] = self._legacy.whole()["function"]
        return assistant_message(message)
