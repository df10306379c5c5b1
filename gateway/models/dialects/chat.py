"""Chat completions (``POST /chat/completions``), the OpenAI-compatible API most servers speak.

The agent's ``messages`` are the conversation; its ``tools`` must all be function tools (other kinds would
carry calls no rule could read). A gateway-answered call becomes the assistant message with every call
and one ``role: tool`` message per call, in order. What the agent reads is the model's last completion
with only the calls it runs (chat_stream.py writes it, whole or streamed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import (
    AgentRequest,
    AgentStream,
    Answered,
    HandedOut,
    Json,
    ModelAnswer,
    Reply,
    RequestProblem,
    as_object,
    offered_body,
)
from gateway.models.dialects.chat_answer import assistant_message
from gateway.models.dialects.chat_results import sent_results, with_screened
from gateway.models.dialects.chat_stream import ChatStream, add_usage, completion, read_calls
from gateway.models.dialects.chat_tools import client_tools, function_tool
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = ["DIALECT", "ChatDialect"]


class ChatDialect:
    """The chat-completions dialect (gateway/models/dialects/base.py)."""

    api = "chat"
    path = "/chat/completions"

    def upstream_headers(self, api_key: str | None) -> dict[str, str]:
        """``Authorization: Bearer`` with the model's key."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def passed_headers(self, agent: Mapping[str, str]) -> dict[str, str]:
        """None of the agent's headers go on."""
        del agent
        return {}

    def read_request(self, body: Json, headers: Mapping[str, str]) -> AgentRequest:
        """``messages`` and function ``tools``; the legacy functions API and several choices are refused."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise RequestProblem("'messages' must be a list of message objects")
        if body.get("functions") is not None or body.get("function_call") is not None:
            raise RequestProblem("the legacy 'functions' API is not served: send 'tools'")
        if body.get("n") not in (None, 1):
            raise RequestProblem("only one choice per request ('n': 1) is served")
        tools = client_tools(body.get("tools"))
        if isinstance(tools, str):
            raise RequestProblem(tools)
        return AgentRequest(str(body["model"]), messages, tools, body, body.get("stream") is True, headers)

    def conversation_key(self, body: Json) -> Any:
        """The messages (their opening names the conversation)."""
        return body.get("messages")

    def offer(self, request: AgentRequest, model: str, gateway_tools: Sequence[ExposedTool]) -> Json:
        """The agent's body with the upstream's model name and the gateway's tools."""
        return offered_body(request, model, [function_tool(t) for t in gateway_tools])

    def model_request(self, base: Json, conversation: list[Json], last: ModelAnswer | None,
                      new: list[Json]) -> Json:
        """The whole conversation, every time."""
        del last, new
        return {**base, "messages": conversation}

    def read_answer(self, answer: Json) -> ModelAnswer:
        """A chat completion's first choice, every tool call in ``tool_calls`` with an id."""
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ModelUpstreamError("the model upstream's response is not a chat completion")
        choice = as_object(choices[0])
        read = assistant_message({**as_object(choice.get("message")), "role": "assistant"})
        message, calls = read_calls(read)
        finish = str(choice.get("finish_reason") or "stop")
        raw = {**answer, "choices": [{**choice, "message": message}, *choices[1:]]}
        return ModelAnswer(raw, calls, finish, answer.get("usage") if isinstance(answer.get("usage"), dict)
                           else None)

    def exchange(self, answer: ModelAnswer, answered: Sequence[Answered]) -> list[Json]:
        """The assistant message, then one tool message per call."""
        message = as_object(as_object(answer.raw["choices"][0]).get("message"))
        return [message, *({"role": "tool", "tool_call_id": a.call.id, "content": a.text} for a in answered)]

    def assistant_turns(self, conversation: Sequence[Json]) -> int:
        """The assistant messages."""
        return sum(1 for m in conversation if m.get("role") == "assistant")

    def call_ids(self, item: Json) -> tuple[str, ...]:
        """An assistant message's tool-call ids."""
        calls = item.get("tool_calls") if item.get("role") == "assistant" else None
        if not isinstance(calls, list):
            return ()
        return tuple(str(c.get("id")) for c in calls if isinstance(c, dict))

    def agent_results(self, conversation: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool],
                      earlier: Callable[[str], HandedOut | None]) -> list[tuple[Any, AgentResult]]:
        """The agent's ``role: tool`` messages answering calls in the conversation (chat_results.py)."""
        del earlier  # a chat conversation always holds its calls
        return list(sent_results(conversation, sent, tools))

    def with_screened(self, conversation: Sequence[Json], found: Sequence[tuple[Any, AgentResult]],
                      screened: Sequence[Screened]) -> list[Json]:
        """The tool messages' contents replaced."""
        return with_screened(conversation, found, screened)

    def whole(self, reply: Reply) -> Json:
        """A chat completion."""
        return completion(reply)

    def stream(self, request: AgentRequest) -> AgentStream:
        """A streamed chat completion (usage last when ``stream_options.include_usage``)."""
        options = request.body.get("stream_options")
        return ChatStream(request.model, isinstance(options, dict) and bool(options.get("include_usage")))

    def add_usage(self, total: Json | None, usage: Json | None) -> Json | None:
        """``prompt_tokens``, ``completion_tokens``, ``total_tokens`` summed."""
        return add_usage(total, usage)

    def error_body(self, status: int, code: str, message: str) -> Json:
        """OpenAI's error shape (``code`` the gateway's stable code)."""
        kind = "invalid_request_error" if 400 <= status < 500 else "api_error"
        return {"error": {"message": message, "type": kind, "code": code}}


DIALECT = ChatDialect()
