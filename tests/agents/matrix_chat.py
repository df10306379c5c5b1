"""The chat-completions side of the action matrix (tests/agents/api_matrix.py): the official ``openai`` client's
``chat.completions.create``, whole and streamed, against the scripted fake of tests/agents/fake_model.py."""

from __future__ import annotations

import json
from typing import Any

from api_matrix import DEPLOY, Side, Turn
from fake_model import FakeModel
from model_proxy_drivers import gateway_model_client

__all__ = ["SIDE"]

Json = dict[str, Any]

TOOLS = [{"type": "function", "function": DEPLOY}]


def _usage(usage: Any) -> dict[str, int]:
    return {"input": usage.prompt_tokens, "output": usage.completion_tokens} if usage is not None else {}


class ChatDriver:
    """An agent loop on ``chat.completions.create``: the conversation is its ``messages``."""

    def start(self, prompt: str) -> list[Json]:
        return [{"role": "user", "content": prompt}]

    async def ask(self, url: str, key: str, run_id: str | None, state: list[Json], stream: bool) -> Turn:
        async with gateway_model_client(url, key, run_id) as client:
            if stream:
                turn, message = await self._streamed(client, state)
            else:
                completion = await client.chat.completions.create(model="any", messages=state,
                                                                  tools=TOOLS)
                choice = completion.choices[0]
                calls = [(c.id, c.function.name, json.loads(c.function.arguments))
                         for c in choice.message.tool_calls or [] if c.type == "function"]
                turn = Turn(choice.message.content or "", calls, (completion.model_extra or {})["gateway"],
                            _usage(completion.usage), choice.finish_reason)
                message = choice.message.model_dump(exclude_none=True)
        state.append(message)
        return turn

    async def _streamed(self, client: Any, state: list[Json]) -> tuple[Turn, Json]:
        stream = await client.chat.completions.create(model="any", messages=state, tools=TOOLS, stream=True,
                                                      stream_options={"include_usage": True})
        text: list[str] = []
        calls: dict[int, Json] = {}
        finish, extension, usage = "", {}, {}
        async for chunk in stream:
            extension = (chunk.model_extra or {}).get("gateway", extension)
            usage = _usage(chunk.usage) or usage
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                text.append(choice.delta.content or "")
                for piece in choice.delta.tool_calls or []:
                    call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += piece.id or ""
                    call["name"] += (piece.function and piece.function.name) or ""
                    call["arguments"] += (piece.function and piece.function.arguments) or ""
        ordered = [calls[i] for i in sorted(calls)]
        message: Json = {"role": "assistant", "content": "".join(text) or None}
        if ordered:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}} for c in ordered]
        turn = Turn("".join(text), [(c["id"], c["name"], json.loads(c["arguments"])) for c in ordered], extension,
                    usage, finish)
        return turn, message

    def results(self, state: list[Json], turn: Turn, outputs: list[str]) -> None:
        state.extend({"role": "tool", "tool_call_id": call_id, "content": output}
                     for (call_id, _, _), output in zip(turn.calls, outputs, strict=True))


def _read_error(body: Any) -> str:
    """The message of an OpenAI error (the client hands over the ``error`` object)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    assert isinstance(error, dict) and isinstance(error.get("message"), str), body
    return str(error["message"])


SIDE = Side(api="chat", path="/chat/completions", driver=ChatDriver(), fake=FakeModel,
            error_body=lambda message: {"error": {"message": message, "type": "invalid_request_error"}},
            read_error=_read_error)
