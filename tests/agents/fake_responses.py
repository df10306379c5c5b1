"""A scripted stand-in for an OpenAI Responses model: ``POST /v1/responses``, whole and streamed.

The script convention is tests/agents/fake_model.py's (``script``, ``next_turn``): the first user text is a
JSON script of tool calls, made in order, one per turn unless ``with_next``; then the answer is the text
``{"tool_results": [...]}``, the output of every ``function_call_output`` item the fake read, in order.

It behaves like the real API where the gateway could get it wrong:

- a response is kept (in memory) unless the request says ``store: false``; ``previous_response_id`` continues
  a kept one (its input and output come first) and an unknown id is a 400, as is an ``input`` that leaves a
  ``function_call`` without its ``function_call_output`` or answers a call no item made;
- every whole answer is validated with ``openai.types.responses.Response`` and every streamed event with a
  pydantic ``TypeAdapter`` of ``ResponseStreamEvent`` before it is sent, so the fake cannot drift from the
  wire format the SDK reads; a stream is ``event: <type>`` and ``data:`` lines, ``sequence_number`` counting.

Every request body is kept in ``requests``. ``fragments`` splits a streamed call's arguments into that many
``function_call_arguments.delta`` events; ``preamble`` opens every tool-calling answer with a message item;
``gate`` (when set) holds a streamed text answer before its end; ``broken`` fails a stream midway.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fake_model import Hook, next_turn, text_of
from openai.types.responses import Response as ResponseObject
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["MODEL", "FakeResponses", "error_body"]

Json = dict[str, Any]

MODEL = "fake-responses"

_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def error_body(message: str, kind: str = "invalid_request_error") -> Json:
    """An error in OpenAI's format."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _items(value: Any) -> list[Json]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []


def _pairing_problem(items: list[Json]) -> str | None:
    """What the real API refuses about function calls and their outputs, or None."""
    calls = [i.get("call_id") for i in items if i.get("type") == "function_call"]
    outputs = [i.get("call_id") for i in items if i.get("type") == "function_call_output"]
    stray = [c for c in outputs if c not in calls]
    if stray:
        return f"No tool call found for function call output with call_id {stray[0]}."
    missing = [c for c in calls if c not in outputs]
    return f"No tool output found for function call {missing[0]}." if missing else None


def _message(text: str, n: int) -> Json:
    return {"type": "message", "id": f"msg_fake_{n}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


class FakeResponses:
    """The scripted Responses model: an ASGI app, what it was sent, the hooks a script may await."""

    def __init__(self) -> None:
        self.requests: list[Json] = []
        self.hooks: dict[str, Hook] = {}
        self.stored: dict[str, list[Json]] = {}  # response id -> the whole conversation through its output
        self.fragments = 1
        self.preamble: str | None = None
        self.gate: asyncio.Event | None = None
        self.broken = False  # a stream fails after its opening events, with the API's ``error`` event
        self.ids: list[str] = []  # every response's id, in order (unique across fakes, as the API's are)
        self._ids = 0
        self._prefix = uuid.uuid4().hex[:12]

    def app(self) -> Starlette:
        """The Starlette app to serve (tests/loopback.py ``serve_app``)."""
        return Starlette(routes=[Route("/v1/responses", self._responses, methods=["POST"])])

    @staticmethod
    def offered_tools(request: Json) -> list[str]:
        """The function names one request offered."""
        return [t["name"] for t in request.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]

    async def _responses(self, request: Request) -> Response:
        body: Json = await request.json()
        self.requests.append(body)
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.stored:
            return JSONResponse(error_body(f"Previous response with id '{previous}' not found."), 400)
        items = [*(self.stored[previous] if previous is not None else []), *_items(body.get("input"))]
        problem = _pairing_problem(items)
        if problem is not None:
            return JSONResponse(error_body(problem), 400)
        self._ids += 1
        answer = self._response(body, await self._output(body, items))
        self.ids.append(answer["id"])
        if body.get("store") is not False:
            self.stored[answer["id"]] = [*items, *answer["output"]]
        if body.get("stream"):
            return StreamingResponse(self._stream(answer), media_type="text/event-stream")
        ResponseObject.model_validate(answer)
        return JSONResponse(answer)

    async def _output(self, body: Json, items: list[Json]) -> list[Json]:
        """The answer's items: the next scripted calls, or the report text."""
        prompt = next((text_of(i.get("content")) for i in items if i.get("role") == "user"), "")
        seen = [text_of(i.get("output")) for i in items if i.get("type") == "function_call_output"]
        turn = await next_turn(prompt, seen, self.offered_tools(body), self.hooks)
        if isinstance(turn, str):
            return [_message(turn, self._ids)]
        opening = [_message(self.preamble, self._ids)] if self.preamble else []
        return [*opening, *({"type": "function_call", "id": f"fc_fake_{self._ids}_{n}", "call_id": f"call_{n}_"
                             f"{step['tool']}", "name": step["tool"], "status": "completed",
                             "arguments": step.get("raw", json.dumps(step["args"]))} for n, step in turn)]

    def _response(self, body: Json, output: list[Json]) -> Json:
        return {"id": f"resp_{self._prefix}_{self._ids}", "object": "response", "created_at": int(time.time()),
                "model": MODEL, "status": "completed", "output": output, "error": None, "incomplete_details": None,
                "instructions": body.get("instructions"), "metadata": {}, "temperature": None, "top_p": None,
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
                "previous_response_id": body.get("previous_response_id"), "store": body.get("store", True),
                "text": {"format": {"type": "text"}},
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                          "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}

    async def _stream(self, answer: Json) -> AsyncIterator[bytes]:
        """The answer as the API streams it: each event checked against the SDK's types first."""
        number = 0

        def event(data: Json) -> bytes:
            nonlocal number
            data = {**data, "sequence_number": number}
            number += 1
            _EVENT.validate_python(data)
            return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

        started = {**answer, "status": "in_progress", "output": [], "usage": None}
        yield event({"type": "response.created", "response": started})
        yield event({"type": "response.in_progress", "response": started})
        if self.broken:
            yield event({"type": "error", "code": "server_error", "message": "the fake broke midway", "param": None})
            return
        for index, item in enumerate(answer["output"]):
            for data in self._item_events(index, item):
                yield event(data)
        if self.gate is not None and all(i["type"] == "message" for i in answer["output"]):
            await self.gate.wait()
        yield event({"type": "response.completed", "response": answer})

    def _item_events(self, index: int, item: Json) -> list[Json]:
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "function_call":
            args = item["arguments"]
            step = len(args) // self.fragments + 1
            return [{"type": "response.output_item.added", "output_index": index,
                     "item": {**item, "arguments": "", "status": "in_progress"}},
                    *({"type": "response.function_call_arguments.delta", **at, "delta": args[s:s + step]}
                      for s in range(0, len(args), step)),
                    {"type": "response.function_call_arguments.done", **at, "arguments": args, "name": item["name"]},
                    {"type": "response.output_item.done", "output_index": index, "item": item}]
        part = item["content"][0]
        parts = {**at, "content_index": 0}
        return [{"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "content": [], "status": "in_progress"}},
                {"type": "response.content_part.added", **parts, "part": {**part, "text": ""}},
                {"type": "response.output_text.delta", **parts, "delta": part["text"], "logprobs": []},
                {"type": "response.output_text.done", **parts, "text": part["text"], "logprobs": []},
                {"type": "response.content_part.done", **parts, "part": part},
                {"type": "response.output_item.done", "output_index": index, "item": item}]
