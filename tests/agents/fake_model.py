"""A scripted stand-in for an OpenAI-compatible model: ``POST /v1/chat/completions``, plain and streamed.

The script is the prompt. The agent's user message is a JSON ``Script``: the tool calls to make, in
order. The fake reads the conversation it is sent, so it keeps no state between requests and any
number of agent runs can share it at once:

- while fewer tool results than scripted calls are in the conversation, it answers with the next
  call (one ``tool_calls`` entry, arguments as given);
- then it answers with text: ``{"tool_results": [...]}``, the content of every tool message it
  received, in order. That final answer is how a test reads what the model saw.

A scripted call may name a ``before`` hook: the fake awaits ``hooks[name](tool_results_so_far)``
before answering with that call, so a test can act (approve a held request, say) at the exact point
in the run where the model has read one result and is about to make the next call. A scripted call may
give ``raw`` arguments: the exact text sent as the call's ``arguments`` (not JSON, say), and ``force``
a call to a tool the request did not offer; ``with_next`` makes the next call in the same turn (parallel
tool calls, each with its own id); ``legacy`` sends the call as the pre-tools API's ``function_call``.

Every request body is kept in ``requests``. Both frameworks are driven through Chat Completions:
OpenAI Agents defaults to the Responses API, but its ``OpenAIChatCompletionsModel`` is a supported,
documented model class, and MAF's ``OpenAIChatCompletionClient`` is the Chat Completions client; one
small, well-known wire format is simpler and more reliable to fake than two. What the frameworks do
with MCP, which is what these tests are about, does not depend on the model API.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["FakeModel", "Hook", "ScriptedCall", "next_turn", "script", "text_of", "tool_results_of"]

Json = dict[str, Any]
Hook = Callable[[list[str]], Awaitable[None]]

MODEL = "fake-model"


@dataclass(frozen=True)
class ScriptedCall:
    """One tool call the fake model will make; ``before`` names a hook awaited first."""

    tool: str
    args: Json = field(default_factory=dict)
    before: str | None = None
    raw: str | None = None  # the arguments text as sent, instead of ``args`` as JSON
    force: bool = False  # call the tool even when the request did not offer it
    with_next: bool = False  # the next scripted call is made in the same turn (parallel tool calls)
    legacy: bool = False  # sent as the pre-tools API's ``function_call`` instead of ``tool_calls``


def script(*calls: ScriptedCall | tuple[str, Json]) -> str:
    """The prompt that makes the fake model make these calls, in order, then report what it read."""
    steps = [c if isinstance(c, ScriptedCall) else ScriptedCall(*c) for c in calls]
    return json.dumps({"calls": [{"tool": s.tool, "args": s.args, "before": s.before,
                                  **({"raw": s.raw} if s.raw is not None else {}),
                                  **({"force": True} if s.force else {}),
                                  **({"with_next": True} if s.with_next else {}),
                                  **({"legacy": True} if s.legacy else {})} for s in steps]})


def tool_results_of(final_output: str) -> list[str]:
    """The tool results the model saw, from its final answer."""
    results: list[str] = json.loads(final_output)["tool_results"]
    return results


def text_of(content: Any) -> str:
    """A message's content as text: a string, or a list of content parts (text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


async def next_turn(prompt: str, seen: list[str], offered: list[str], hooks: dict[str, Hook]
                    ) -> list[tuple[int, Json]] | str:
    """What the scripted model says next, given its prompt and the tool results it read so far: the turn's
    calls (each with its position in the script, for its id), or its text (the report, or why it cannot)."""
    try:
        calls = json.loads(prompt)["calls"]
    except (ValueError, KeyError, TypeError):
        return f"not a script: {prompt[:200]!r}"
    if len(seen) >= len(calls):
        return json.dumps({"tool_results": seen})
    first = len(seen)
    turn = [calls[first]]
    while turn[-1].get("with_next") and first + len(turn) < len(calls):
        turn.append(calls[first + len(turn)])
    if turn[0].get("before"):
        await hooks[turn[0]["before"]](seen)
    missing = [s["tool"] for s in turn if s["tool"] not in offered and not s.get("force")]
    if missing:
        return json.dumps({"tool_results": seen, "not_offered": missing[0], "offered": offered})
    return [(first + i, step) for i, step in enumerate(turn)]


class FakeModel:
    """The scripted model: an ASGI app, the requests it got, and the hooks a script may await."""

    def __init__(self) -> None:
        self.requests: list[Json] = []
        self.hooks: dict[str, Hook] = {}
        # When set, a streamed text answer waits for this event between its text and its finish chunk.
        self.gate: asyncio.Event | None = None
        # Streamed tool calls come whole in one delta, or (above 1) as the id and name first, then the
        # arguments in this many pieces, as real models send them.
        self.fragments = 1
        self._ids = 0

    def app(self) -> Starlette:
        """The Starlette app to serve (tests/loopback.py ``serve_app``)."""
        return Starlette(routes=[Route("/v1/chat/completions", self._completions, methods=["POST"])])

    def offered_tools(self, request: Json) -> list[str]:
        """The function names the framework offered in one request."""
        return [t["function"]["name"] for t in request.get("tools") or [] if t.get("type") == "function"]

    async def _completions(self, request: Request) -> Response:
        body: Json = await request.json()
        self.requests.append(body)
        message = await self._answer(body)
        if body.get("stream"):
            return StreamingResponse(self._stream(message, body), media_type="text/event-stream")
        self._ids += 1
        finish = "tool_calls" if message.get("tool_calls") else "function_call" if message.get("function_call") \
            else "stop"
        return JSONResponse({
            "id": f"chatcmpl-{self._ids}", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    async def _answer(self, body: Json) -> Json:
        """The assistant message for this conversation: the next scripted call, or the report."""
        messages: list[Json] = body.get("messages") or []
        prompt = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
        seen = [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]
        turn = await next_turn(prompt, seen, self.offered_tools(body), self.hooks)
        if isinstance(turn, str):
            return {"role": "assistant", "content": turn}
        tool_calls = [{"id": f"call_{n}_{step['tool']}", "type": "function",
                       "function": {"name": step["tool"], "arguments": step.get("raw", json.dumps(step["args"]))}}
                      for n, step in turn]
        if turn[0][1].get("legacy"):
            return {"role": "assistant", "content": None, "function_call": tool_calls[0]["function"]}
        return {"role": "assistant", "content": None, "tool_calls": tool_calls}

    async def _stream(self, message: Json, body: Json) -> AsyncIterator[bytes]:
        """The same answer as Server-Sent Events of ``chat.completion.chunk`` objects."""
        self._ids += 1
        base = {"id": f"chatcmpl-{self._ids}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": MODEL}

        def chunk(delta: Json, finish: str | None = None, **extra: Any) -> bytes:
            data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                    **extra}
            return f"data: {json.dumps(data)}\n\n".encode()

        yield chunk({"role": "assistant", "content": ""})
        if message.get("tool_calls"):
            for index, call in enumerate(message["tool_calls"]):
                if self.fragments <= 1:
                    yield chunk({"tool_calls": [{"index": index, **call}]})
                    continue
                function, args = call["function"], call["function"]["arguments"]
                yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": function["name"], "arguments": ""}}]})
                step = len(args) // self.fragments + 1
                for start in range(0, len(args), step):
                    yield chunk({"tool_calls": [{"index": index, "function": {"arguments": args[start:start + step]}}]})
            yield chunk({}, "tool_calls")
        elif message.get("function_call"):
            function = message["function_call"]
            yield chunk({"function_call": {"name": function["name"], "arguments": ""}})
            yield chunk({"function_call": {"arguments": function["arguments"]}})
            yield chunk({}, "function_call")
        else:
            yield chunk({"content": message["content"]})
            if self.gate is not None:
                await self.gate.wait()
            yield chunk({}, "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"
