"""A streamed Responses response: the model's items through at once, its function calls once decided.

The agent's stream is one response over every model request: ``response.created`` and
``response.in_progress`` once, then each turn's items (text, reasoning, hosted tool calls) as the model
streams them, their ``output_index`` re-mapped to the agent's stream and every ``sequence_number``
re-numbered, strictly increasing. A ``function_call`` item is held, with all its events, until it is
decided; the close says what is still to say (the returned calls as ``output_item.added``,
``function_call_arguments.delta``/``.done``, ``output_item.done``, or a gateway text as a message), then
``response.completed`` whose ``response.output`` is exactly what was streamed, with the summed usage and the
``gateway`` field.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import Json, ModelAnswer, Reply, as_object, sse
from gateway.models.dialects.responses_chain import keep_unseen, renamed
from gateway.models.dialects.responses_wire import CALL, final_output, new_head, read_answer, response

__all__ = ["ResponsesStream"]


_HEAD = ("response.created", "response.in_progress", "response.queued")
_END = ("response.completed", "response.incomplete")


class ResponsesStream:
    """One agent stream of a Responses response (gateway/models/dialects/base.py ``AgentStream``)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.head: Json | None = None  # the response's fields, from the first turn's response.created
        self.out: list[Json] = []  # the items streamed to the agent, by the agent's output_index
        self._seq = 0
        self.turn()

    def turn(self) -> None:
        """A model request starts: a new map of the model's output indices, a new assembly."""
        self._map: dict[int, int | None] = {}  # the model's output_index -> the agent's (None: a held call)
        self._items: dict[int, Json] = {}  # the model's items as last seen, by its output_index
        self._arguments: dict[int, list[str]] = {}
        self._ended: Json | None = None

    def _event(self, data: Json) -> bytes:
        data = {**data, "sequence_number": self._seq}
        self._seq += 1
        return sse(data, str(data["type"]))

    def _opening(self, head: Json) -> list[bytes]:
        self.head = {k: v for k, v in head.items() if k not in ("output", "usage", "status", "error")}
        started = {**self.head, "status": "in_progress", "output": [], "usage": None, "error": None}
        return [self._event({"type": "response.created", "response": started}),
                self._event({"type": "response.in_progress", "response": started})]

    def add(self, event: Json) -> list[bytes]:
        """One upstream event: the model's items pass at once, re-indexed; its function calls are held."""
        kind = event.get("type")
        if kind == "error":
            raise ModelUpstreamError(f"the model upstream failed: {event.get('message')}")
        if kind == "response.failed":
            error = as_object(as_object(event.get("response")).get("error"))
            raise ModelUpstreamError(f"the model upstream failed: {error.get('message', 'response.failed')}")
        if kind in _HEAD:
            return self._opening(as_object(event.get("response"))) if self.head is None else []
        if kind in _END:
            self._ended = as_object(event.get("response"))
            return []
        index = event.get("output_index")
        if not isinstance(index, int):
            return []  # no item of the answer: nothing the agent is owed
        return self._item_event(str(kind), index, event)

    def _item_event(self, kind: str, index: int, event: Json) -> list[bytes]:
        if kind == "response.output_item.added":
            item = as_object(event.get("item"))
            held = item.get("type") == CALL
            self._map[index] = None if held else len(self.out)
            if not held:
                self.out.append(item)
        elif index not in self._map:
            return []  # an event for an item the model never added: dropped, never passed
        item = as_object(event.get("item"))
        if kind in ("response.output_item.added", "response.output_item.done"):
            self._items[index] = item
        if kind == "response.function_call_arguments.delta" and isinstance(event.get("delta"), str):
            self._arguments.setdefault(index, []).append(event["delta"])
        ours = self._map[index]
        if ours is None:
            return []
        if kind == "response.output_item.done":
            if item.get("type") == CALL:
                raise ModelUpstreamError("the model upstream streamed a function call as another item's end")
            self.out[ours] = item
        return [self._event({**event, "output_index": ours})]

    def answer(self) -> ModelAnswer:
        """The turn's response: the model's closing response, else its items as streamed."""
        if self._ended is not None and isinstance(self._ended.get("output"), list):
            return read_answer(self._ended)
        items = []
        for index in sorted(self._items):
            item = self._items[index]
            if item.get("type") == CALL and "arguments" not in item:
                item = {**item, "arguments": "".join(self._arguments.get(index, []))}
            items.append(item)
        return read_answer({**(self.head or {}), "output": items, "status": "completed"})

    def close(self, reply: Reply) -> list[bytes]:
        """What is still to say, then ``response.completed`` with the whole response as streamed."""
        events = [] if self.head is not None else self._opening(new_head(self.model))
        for item in final_output(reply) if reply.returned or reply.text is not None else ():
            if item.get("type") == CALL or reply.text is not None:  # the answer's other items were streamed
                events.extend(self._new_item(item))
        assert self.head is not None
        # The id stays the one response.created named (clients hold a stream to it); see _Renamed.
        last = reply.answer.raw.get("id") if reply.answer is not None and reply.text is None else None
        if isinstance(last, str) and last != self.head.get("id"):
            renamed(str(self.head.get("id")), last)
        if reply.answer is not None and reply.text is None:
            keep_unseen(last, reply.answered)
        whole = response(self.head, reply, list(self.out))
        kind = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
        events.append(self._event({"type": kind, "response": whole}))
        return events

    def _new_item(self, item: Json) -> list[bytes]:
        """One item the model's stream did not carry (a decided call, a gateway text), as its events."""
        index = len(self.out)
        self.out.append(item)
        base = {"output_index": index, "item_id": item["id"]}
        if item["type"] == CALL:
            return [self._event({"type": "response.output_item.added", "output_index": index,
                                 "item": {**item, "arguments": "", "status": "in_progress"}}),
                    self._event({"type": "response.function_call_arguments.delta", **base,
                                 "delta": item["arguments"]}),
                    self._event({"type": "response.function_call_arguments.done", **base,
                                 "arguments": item["arguments"], "name": item.get("name")}),
                    self._event({"type": "response.output_item.done", "output_index": index, "item": item})]
        part = item["content"][0]
        text: Any = part["text"]
        parts = {**base, "content_index": 0}
        return [self._event({"type": "response.output_item.added", "output_index": index,
                             "item": {**item, "content": [], "status": "in_progress"}}),
                self._event({"type": "response.content_part.added", **parts, "part": {**part, "text": ""}}),
                self._event({"type": "response.output_text.delta", **parts, "delta": text, "logprobs": []}),
                self._event({"type": "response.output_text.done", **parts, "text": text, "logprobs": []}),
                self._event({"type": "response.content_part.done", **parts, "part": part}),
                self._event({"type": "response.output_item.done", "output_index": index, "item": item})]

    def error(self, code: str, message: str) -> bytes:
        """The ``error`` event that ends a stream whose upstream failed midway."""
        return self._event({"type": "error", "code": code, "message": message, "param": None})


