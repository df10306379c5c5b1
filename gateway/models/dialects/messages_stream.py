"""The agent's Messages stream, over every model request the gateway makes for one agent request.

The agent reads one message: ``message_start`` once (the first answer's, or the gateway's own when the model
was not asked), content blocks indexed 0, 1, 2, ... over all the turns, then ``message_delta`` (the final
``stop_reason``, the usage summed over every model request, the ``gateway`` field) and ``message_stop``;
every event with its ``event:`` line, which the Anthropic SDK dispatches on.

Per turn, what is not a tool call streams through at once with its block index re-mapped (text, thinking,
the upstream's own server tools); a ``tool_use`` block is held until its call is decided. A returned call is
then sent whole: ``content_block_start`` with ``input: {}``, one ``input_json_delta`` of the admitted
arguments, ``content_block_stop``. The upstream's ``message_delta`` and ``message_stop`` are read, not sent.
"""

from __future__ import annotations

import json
import uuid

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import EXTENSION, Json, ModelAnswer, Reply, as_object, call_arguments, sse
from gateway.models.dialects.messages_wire import read_message, with_counts

__all__ = ["MessagesStream"]

# The text of a streamed delta: which field of the block it adds to.
_APPENDS = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking")}


class _Block:
    """One content block of the turn being assembled: its start, its pieces, its index in the agent's stream."""

    __slots__ = ("held", "index", "json", "refused", "start", "text")

    def __init__(self, start: Json, index: int | None) -> None:
        self.start = start
        self.index = index  # None: held (a tool_use block)
        self.held = index is None
        self.json: list[str] = []
        self.text: dict[str, list[str]] = {}
        self.refused: str | None = None  # why the streamed input cannot be read

    def add(self, delta: Json) -> None:
        kind = delta.get("type")
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self.json.append(delta["partial_json"])
        elif kind in _APPENDS and isinstance(delta.get(_APPENDS[kind][1]), str):
            self.text.setdefault(_APPENDS[kind][0], []).append(delta[_APPENDS[kind][1]])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            self.text["signature"] = [delta["signature"]]
        elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
            self.start = {**self.start, "citations": [*(self.start.get("citations") or []), delta["citation"]]}

    def whole(self) -> Json:
        """The block as a whole answer carries it (a tool's input parsed; {} and ``refused`` when it cannot be)."""
        block = {**self.start, **{key: as_text(self.start.get(key)) + "".join(p) for key, p in self.text.items()}}
        if self.json or block.get("type") == "tool_use":
            block["input"], self.refused = call_arguments("".join(self.json))
        return block


def as_text(value: object) -> str:
    return value if isinstance(value, str) else ""


class MessagesStream:
    """One agent stream (``AgentStream``)."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._started = False
        self._next = 0  # the agent's next content block index
        self._head: Json = {}
        self._blocks: dict[int, _Block] = {}
        self._delta: Json = {}
        self._usage: Json = {}

    def turn(self) -> None:
        """A model request starts."""
        self._head, self._blocks, self._delta, self._usage = {}, {}, {}, {}

    def add(self, event: Json) -> list[bytes]:
        """One upstream event; what the agent gets at once."""
        kind = event.get("type")
        if kind == "message_start":
            return self._start(as_object(event.get("message")))
        if kind == "ping":
            return [sse({"type": "ping"}, "ping")]
        if kind == "message_delta":
            self._delta.update(as_object(event.get("delta")))
            self._usage.update(as_object(event.get("usage")))  # the API's counts are the totals so far
            return []
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return []  # message_stop, and events this gateway does not know, are not the agent's
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ModelUpstreamError(f"the model upstream streamed a {kind} without a block index")
        if kind == "content_block_start":
            return self._block(index, as_object(event.get("content_block")))
        block = self._blocks.get(index)
        if block is None:
            raise ModelUpstreamError(f"the model upstream streamed a {kind} for block {index}, which it never "
                                     "started")
        if kind == "content_block_delta":
            block.add(as_object(event.get("delta")))
        if block.held:
            return []
        return [sse({**event, "index": block.index}, kind)]

    def _start(self, message: Json) -> list[bytes]:
        self._head = message
        self._usage = dict(as_object(message.get("usage")))
        if self._started:
            return []
        self._started = True
        return [sse({"type": "message_start", "message": {**message, "content": []}}, "message_start")]

    def _block(self, index: int, start: Json) -> list[bytes]:
        if index in self._blocks:
            raise ModelUpstreamError(f"the model upstream started block {index} twice")
        if start.get("type") == "tool_use":
            self._blocks[index] = _Block(start, None)
            return []
        self._blocks[index] = block = _Block(start, self._next)
        self._next += 1
        return [sse({"type": "content_block_start", "index": block.index, "content_block": start},
                    "content_block_start")]

    def answer(self) -> ModelAnswer:
        """This turn's answer, read as a whole ``Message`` would be."""
        ordered = [self._blocks[i] for i in sorted(self._blocks)]
        answer = read_message({**self._head, "type": "message", "role": "assistant",
                               "content": [b.whole() for b in ordered],
                               "stop_reason": self._delta.get("stop_reason") or "end_turn",
                               "stop_sequence": self._delta.get("stop_sequence"), "usage": self._usage})
        tools = [b for b in ordered if b.held]  # in the order of the answer's calls
        for call, block in zip(answer.calls, tools, strict=True):  # a streamed input that is not JSON: refused
            if block.refused is not None:
                call.refused = block.refused
        return answer

    def close(self, reply: Reply) -> list[bytes]:
        """The decided calls, a gateway text, the finish with the summed usage and the extension, the end."""
        events = [] if self._started else self._start({
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": self._model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": with_counts(None)})
        for call, arguments in reply.returned:
            start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            events += self._whole_block(start, {"type": "input_json_delta",
                                                "partial_json": json.dumps(arguments, ensure_ascii=False)})
        if reply.text is not None:
            events += self._whole_block({"type": "text", "text": ""}, {"type": "text_delta", "text": reply.text})
        ending = reply.answer if reply.text is None and not reply.returned else None  # the model's own ending
        stop = "tool_use" if reply.returned else ending.finish if ending is not None else "end_turn"
        sequence = ending.raw.get("stop_sequence") if ending is not None else None
        events.append(sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": sequence},
                           "usage": with_counts(reply.usage), EXTENSION: reply.extension}, "message_delta"))
        events.append(sse({"type": "message_stop"}, "message_stop"))
        return events

    def _whole_block(self, start: Json, delta: Json) -> list[bytes]:
        index, self._next = self._next, self._next + 1
        return [sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start"),
                sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"),
                sse({"type": "content_block_stop", "index": index}, "content_block_stop")]

    def error(self, code: str, message: str) -> bytes:
        """The error event the SDK raises on (``event: error``)."""
        return sse({"type": "error", "error": {"type": "api_error", "message": message, "code": code}}, "error")
