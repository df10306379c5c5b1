"""A scripted stand-in for an Anthropic model: ``POST /v1/messages``, whole and streamed.

The script convention is tests/agents/fake_model.py's (``script``, ``next_turn``): the first user text is a
JSON script of tool calls, made in order, one per turn unless ``with_next``; then the answer is the text
``{"tool_results": [...], "is_error": [...]}``: the text of every ``tool_result`` block the fake read, in
order, and whether each said ``is_error``.

It behaves like the real API where the gateway could get it wrong:

- it wants ``x-api-key`` (its ``api_key``, when it has one; 401 ``authentication_error`` else) and an
  ``anthropic-version`` header (400 else); every request's headers are kept in ``headers``, its body in
  ``requests``;
- every ``tool_use`` block of an assistant turn must be answered by a ``tool_result`` block at the start of
  the next user turn, and a ``tool_result`` must answer such a block (400 ``invalid_request_error`` else), and
  ``is_error`` must be a boolean;
- every whole answer is validated with ``anthropic.types.Message`` and every streamed event with a pydantic
  ``TypeAdapter`` of ``anthropic.types.RawMessageStreamEvent`` before it is sent, so the fake cannot drift
  from the wire format the SDK reads; a stream is ``event: <type>`` and ``data:`` lines, with a ``ping``.

``preamble`` (when set) opens every tool-calling turn with a text block, as Claude often does; ``fragments``
splits a streamed ``input_json_delta`` into that many pieces; a scripted call's ``raw`` is sent as the
streamed ``partial_json`` text (a whole answer cannot carry arguments that are not a JSON object: 500);
``fail`` is (status, error type) for the next request, answered in the API's error format.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from anthropic.types import Message, RawMessageStreamEvent
from fake_model import Hook, next_turn, text_of
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["API_KEY", "MODEL", "FakeMessages", "errors_of"]

Json = dict[str, Any]

MODEL = "fake-claude"
API_KEY = "sk-ant-upstream-key-0123456789abcdef"  # what the gateway must send as x-api-key

_EVENT = TypeAdapter(RawMessageStreamEvent)


def errors_of(final_output: str) -> list[bool]:
    """Which tool results the model saw were ``is_error``, from its final answer."""
    flags: list[bool] = json.loads(final_output)["is_error"]
    return flags


def error_body(kind: str, message: str) -> Json:
    """An error in the Messages API's format."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def _results(messages: list[Json]) -> list[Json]:
    """Every ``tool_result`` block of the user turns, in order."""
    return [block for m in messages if m.get("role") == "user" and isinstance(m.get("content"), list)
            for block in m["content"] if isinstance(block, dict) and block.get("type") == "tool_result"]


def _pairing_problem(messages: list[Json]) -> str | None:
    """What the real API refuses about tool_use/tool_result pairing, or None."""
    open_ids: list[str] = []
    for message in messages:
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        kinds = [b.get("type") for b in blocks if isinstance(b, dict)]
        if message.get("role") == "assistant":
            if open_ids:
                return f"tool_use ids were found without tool_result blocks immediately after: {open_ids}"
            open_ids = [b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
            continue
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if any(not isinstance(b.get("is_error", False), bool) for b in results):
            return "tool_result.is_error: Input should be a valid boolean"
        if kinds[:len(results)] != ["tool_result"] * len(results):
            return "tool_result blocks must come first in a user turn"
        answered = [b.get("tool_use_id") for b in results]
        if sorted(map(str, answered)) != sorted(map(str, open_ids)):
            return f"unexpected tool_use_id in tool_result blocks: {answered} (the last assistant turn had {open_ids})"
        open_ids = []
    return f"tool_use ids were found without tool_result blocks: {open_ids}" if open_ids else None


class FakeMessages:
    """The scripted Messages model: an ASGI app, what it was sent, and the hooks a script may await."""

    def __init__(self, api_key: str | None = API_KEY) -> None:
        self.api_key = api_key
        self.requests: list[Json] = []
        self.headers: list[dict[str, str]] = []
        self.hooks: dict[str, Hook] = {}
        self.preamble: str | None = None
        self.fragments = 1
        self.usage: Json = {"input_tokens": 5, "output_tokens": 3}
        self.fail: tuple[int, str] | None = None
        self.gate: asyncio.Event | None = None  # a streamed text answer waits for it before its finish
        self._ids = 0

    def app(self) -> Starlette:
        """The Starlette app to serve (tests/loopback.py ``serve_app``)."""
        return Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    def reset(self) -> None:
        """Forget what was sent and every setting a test made."""
        self.__init__(self.api_key)  # type: ignore[misc]

    @staticmethod
    def offered_tools(request: Json) -> list[str]:
        """The tool names one request offered."""
        return [t["name"] for t in request.get("tools") or [] if isinstance(t, dict) and "name" in t]

    async def _messages(self, request: Request) -> Response:
        self.headers.append(dict(request.headers))
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            return JSONResponse(error_body("authentication_error", "invalid x-api-key"), 401)
        if not request.headers.get("anthropic-version"):
            return JSONResponse(error_body("invalid_request_error", "anthropic-version: header is required"), 400)
        body: Json = await request.json()
        self.requests.append(body)
        if self.fail is not None:
            (status, kind), self.fail = self.fail, None
            return JSONResponse(error_body(kind, f"the fake failed this request ({kind})"), status)
        messages = body.get("messages")
        if not isinstance(messages, list) or not isinstance(body.get("max_tokens"), int):
            return JSONResponse(error_body("invalid_request_error", "messages and max_tokens are required"), 400)
        problem = _pairing_problem(messages)
        if problem is not None:
            return JSONResponse(error_body("invalid_request_error", f"messages: {problem}"), 400)
        content = await self._content(body, messages)
        if content is None:
            return JSONResponse(error_body("api_error", "raw arguments can only be streamed"), 500)
        self._ids += 1
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        message = {"id": f"msg_fake_{self._ids}", "type": "message", "role": "assistant", "model": MODEL,
                   "content": content, "stop_reason": stop, "stop_sequence": None, "usage": dict(self.usage)}
        if body.get("stream"):
            return StreamingResponse(self._stream(message), media_type="text/event-stream")
        Message.model_validate(message)
        return JSONResponse(message)

    async def _content(self, body: Json, messages: list[Json]) -> list[Json] | None:
        """The answer's content blocks: the next scripted calls, or the report text."""
        prompt = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
        results = _results(messages)
        seen = [text_of(b.get("content")) for b in results]
        turn = await next_turn(prompt, seen, self.offered_tools(body), self.hooks)
        if isinstance(turn, str):
            if turn.startswith("{"):
                turn = json.dumps({**json.loads(turn), "is_error": [bool(b.get("is_error")) for b in results]})
            return [{"type": "text", "text": turn}]
        if any("raw" in step for _, step in turn) and not body.get("stream"):
            return None
        blocks = [{"type": "text", "text": self.preamble}] if self.preamble else []
        return [*blocks, *({"type": "tool_use", "id": f"toolu_{n}_{step['tool']}", "name": step["tool"],
                            "input": step["args"], **({"raw": step["raw"]} if "raw" in step else {})}
                           for n, step in turn)]

    async def _stream(self, message: Json) -> AsyncIterator[bytes]:
        """The answer as the API streams it: each event checked against the SDK's types first."""

        def event(data: Json) -> bytes:
            if data["type"] != "ping":
                _EVENT.validate_python(data)
            return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}
        yield event({"type": "message_start", "message": start})
        yield event({"type": "ping"})
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                yield event({"type": "content_block_start", "index": index, "content_block": {"type": "text",
                                                                                           "text": ""}})
                yield event({"type": "content_block_delta", "index": index,
                             "delta": {"type": "text_delta", "text": block["text"]}})
            else:
                shown = {k: v for k, v in block.items() if k != "raw"}
                yield event({"type": "content_block_start", "index": index, "content_block": {**shown, "input": {}}})
                args = block.get("raw", json.dumps(block["input"]))
                step = len(args) // self.fragments + 1
                for at in range(0, len(args), step):
                    yield event({"type": "content_block_delta", "index": index,
                                 "delta": {"type": "input_json_delta", "partial_json": args[at:at + step]}})
            yield event({"type": "content_block_stop", "index": index})
        if self.gate is not None and message["stop_reason"] == "end_turn":
            await self.gate.wait()
        yield event({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                     "usage": {"output_tokens": usage["output_tokens"]}})
        yield event({"type": "message_stop"})
