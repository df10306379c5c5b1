"""What the model proxy benchmark's model answers, per API: a canned answer carrying three tool calls.

One entry per model API in ``ANSWERS`` (bench/model_proxy.py times every entry whose API the gateway speaks):
the path under ``/v1``, the agent's request (the three tools offered), the whole answer, and the same answer
as the stream's ``(event name, data)`` pairs. Adding an API is one entry here.

    python bench/_model_answers.py PORT     serves every entry at /v1 + path (whole, or streamed when asked)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

SERVICES = ("web", "api", "worker")  # one deploy call each, every one allowed by the benchmark's policy


@dataclass(frozen=True)
class Canned:
    """One API's side of the benchmark."""

    path: str
    request: Json  # what the agent sends (``model`` and ``stream`` are set per request)
    whole: Json
    events: list[tuple[str | None, Json]]  # the streamed answer; a None name sends no ``event:`` line
    done: bool = False  # end the stream with ``data: [DONE]``


def _chat() -> Canned:
    tool = {"type": "function", "function": {"name": "deploy", "description": "Deploy a service.",
                                             "parameters": {"type": "object",
                                                            "properties": {"service": {"type": "string"}}}}}
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "deploy", "arguments": json.dumps({"service": s})}} for i, s in enumerate(SERVICES)]
    base = {"id": "chatcmpl-bench", "created": 1, "model": "bench-model"}
    usage = {"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40}
    whole = {**base, "object": "chat.completion", "usage": usage,
             "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                          "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}
    head = {**base, "object": "chat.completion.chunk"}

    def chunk(delta: Json, finish: str | None = None) -> Json:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    events: list[tuple[str | None, Json]] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk({"tool_calls": [{"index": i, **c}]})) for i, c in enumerate(calls)]
    events.append((None, chunk({}, "tool_calls")))
    request = {"messages": [{"role": "user", "content": "Deploy web, api and worker."}], "tools": [tool]}
    return Canned("/chat/completions", request, whole, events, done=True)


def _messages() -> Canned:
    tool = {"name": "deploy", "description": "Deploy a service.",
            "input_schema": {"type": "object", "properties": {"service": {"type": "string"}}}}
    blocks = [{"type": "tool_use", "id": f"toolu_{i}", "name": "deploy", "input": {"service": s}}
              for i, s in enumerate(SERVICES)]
    usage = {"input_tokens": 10, "output_tokens": 30}
    whole = {"id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-model", "content": blocks,
             "stop_reason": "tool_use", "stop_sequence": None, "usage": usage}
    events: list[tuple[str | None, Json]] = [("message_start", {"type": "message_start", "message": {
        **whole, "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for i, block in enumerate(blocks):
        events += [("content_block_start", {"type": "content_block_start", "index": i,
                                            "content_block": {**block, "input": {}}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                       "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}),
                   ("content_block_stop", {"type": "content_block_stop", "index": i})]
    events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                  "usage": {"output_tokens": 30}}),
               ("message_stop", {"type": "message_stop"})]
    request = {"max_tokens": 1024, "messages": [{"role": "user", "content": "Deploy web, api and worker."}],
               "tools": [tool]}
    return Canned("/messages", request, whole, events)


def _responses() -> Canned:
    tool = {"type": "function", "name": "deploy", "description": "Deploy a service.",
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}}}}
    calls = [{"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": "deploy",
              "arguments": json.dumps({"service": s}), "status": "completed"} for i, s in enumerate(SERVICES)]
    usage = {"input_tokens": 10, "output_tokens": 30, "total_tokens": 40,
             "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}
    base = {"id": "resp_bench", "object": "response", "created_at": 1, "model": "bench-model", "error": None,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [tool], "store": False}
    whole = {**base, "status": "completed", "output": calls, "usage": usage}
    started = {**base, "status": "in_progress", "output": [], "usage": None}
    data: list[Json] = [{"type": "response.created", "response": started},
                        {"type": "response.in_progress", "response": started}]
    for i, call in enumerate(calls):
        at = {"output_index": i, "item_id": call["id"]}
        data += [{"type": "response.output_item.added", "output_index": i,
                  "item": {**call, "arguments": "", "status": "in_progress"}},
                 {"type": "response.function_call_arguments.delta", **at, "delta": call["arguments"]},
                 {"type": "response.function_call_arguments.done", **at, "arguments": call["arguments"]},
                 {"type": "response.output_item.done", "output_index": i, "item": call}]
    data.append({"type": "response.completed", "response": whole})
    events: list[tuple[str | None, Json]] = [(d["type"], {**d, "sequence_number": n}) for n, d in enumerate(data)]
    request = {"input": "Deploy web, api and worker.", "tools": [tool], "store": False}
    return Canned("/responses", request, whole, events)


ANSWERS: dict[str, Canned] = {"chat": _chat(), "responses": _responses(), "messages": _messages()}


def _app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def endpoint(canned: Canned) -> Any:
        stream = b"".join((f"event: {name}\n" if name else "").encode() + f"data: {json.dumps(data)}\n\n".encode()
                          for name, data in canned.events) + (b"data: [DONE]\n\n" if canned.done else b"")
        whole = json.dumps(canned.whole).encode()

        async def answer(request: Request) -> Response:
            body = await request.json()
            if body.get("stream"):
                return StreamingResponse(iter([stream]), media_type="text/event-stream")
            return Response(whole, media_type="application/json")

        return answer

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[*(Route(f"/v1{c.path}", endpoint(c), methods=["POST"]) for c in ANSWERS.values()),
                             Route("/healthz", healthz)])


if __name__ == "__main__":
    import uvicorn

    if len(sys.argv) != 2:
        sys.exit("usage: python bench/_model_answers.py PORT")
    uvicorn.run(_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
