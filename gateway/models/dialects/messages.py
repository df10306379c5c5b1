"""Anthropic's Messages API (``POST /v1/messages``) as the model proxy's dialect.

- The agent's request: ``messages`` (user and assistant turns; a turn's ``content`` a string or a list of
  blocks), ``system``, ``tools`` (messages_tools.py) and ``tool_choice`` pass on as sent. The MCP connector
  (``mcp_servers``) is refused: the upstream would call those tools itself, where no rule sees the calls.
- A model answer is a ``Message``: every ``tool_use`` block is one tool call (its ``input`` an object; one that
  is not is refused), decided; the other blocks (text, thinking, the upstream's own server tools) pass through.
- When the gateway answered every call itself, the conversation gets the answer as an assistant turn and one
  user turn of ``tool_result`` blocks, in the calls' order, ``is_error: true`` for a refusal, an unknown tool
  or a failed gateway tool; the model is asked again.
- The agent's whole response is the last answer with only the returned ``tool_use`` blocks (their ``input``
  the admitted arguments), or a text message; ``usage`` summed in the API's own keys; ``gateway`` on top.
- The upstream gets the configured key as ``x-api-key`` and the agent's ``anthropic-version`` (else
  ``2023-06-01``) and ``anthropic-beta``; errors go out as ``{"type": "error", "error": {...}}``.

The agent's own tool results (``tool_result`` blocks) are read in messages_results.py, the stream in
messages_stream.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.models.dialects.base import (
    EXTENSION,
    AgentRequest,
    AgentStream,
    Answered,
    HandedOut,
    Json,
    ModelAnswer,
    Reply,
    RequestProblem,
    offered_body,
)
from gateway.models.dialects.messages_results import agent_results, with_screened
from gateway.models.dialects.messages_stream import MessagesStream
from gateway.models.dialects.messages_tools import gateway_tool, read_tools
from gateway.models.dialects.messages_wire import add_usage, error_body, read_message, text_message, with_counts
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = ["DIALECT", "MessagesDialect"]

VERSION = "2023-06-01"  # anthropic-version when the agent sent none
_PASSED = ("anthropic-beta",)  # passed on as the agent sent them
_ROLES = ("user", "assistant")


def _read_messages(body: Json) -> list[Json]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RequestProblem("'messages' must be a list of message objects")
    for message in messages:
        if message.get("role") not in _ROLES:
            raise RequestProblem("every message's 'role' must be 'user' or 'assistant' (the system prompt is "
                                 "'system')")
        content = message.get("content")
        if not isinstance(content, str) and not (isinstance(content, list) and
                                                 all(isinstance(b, dict) for b in content)):
            raise RequestProblem("every message's 'content' must be a string or a list of content blocks")
    return messages


class MessagesDialect:
    """The Messages API; pure, one instance (``DIALECT``)."""

    api = "messages"
    path = "/messages"

    def upstream_headers(self, api_key: str | None) -> dict[str, str]:
        """The configured key as ``x-api-key``."""
        return {"x-api-key": api_key} if api_key else {}

    def passed_headers(self, agent: Mapping[str, str]) -> dict[str, str]:
        """``anthropic-version`` (the agent's, else VERSION) and ``anthropic-beta`` as the agent sent it."""
        return {"anthropic-version": agent.get("anthropic-version") or VERSION,
                **{name: agent[name] for name in _PASSED if agent.get(name)}}

    def read_request(self, body: Json, headers: Mapping[str, str]) -> AgentRequest:
        """The agent's request; ``RequestProblem`` naming what cannot be served."""
        messages = _read_messages(body)
        if body.get("mcp_servers"):
            raise RequestProblem("the MCP connector ('mcp_servers') is not served: the model's upstream would call "
                                 "those tools itself, where the gateway's policies cannot see the calls; give the "
                                 "agent the tools, or put the MCP servers behind the gateway")
        tools = read_tools(body.get("tools"))
        if isinstance(tools, str):
            raise RequestProblem(tools)
        return AgentRequest(body["model"], messages, tools, body, body.get("stream") is True, headers)

    def conversation_key(self, body: Json) -> Any:
        """The system prompt and the turns."""
        return [body.get("system"), *(body.get("messages") or [])]

    def offer(self, request: AgentRequest, model: str, gateway_tools: Sequence[ExposedTool]) -> Json:
        """The agent's body, the model mapped, no ``stream``, the gateway's tools added."""
        return offered_body(request, model, [gateway_tool(t) for t in gateway_tools])

    def model_request(self, base: Json, conversation: list[Json], last: ModelAnswer | None,
                      new: list[Json]) -> Json:
        """The whole conversation every time (the API keeps none)."""
        del last, new
        return {**base, "messages": conversation}

    def read_answer(self, answer: Json) -> ModelAnswer:
        """A whole ``Message``."""
        return read_message(answer)

    def exchange(self, answer: ModelAnswer, answered: Sequence[Answered]) -> list[Json]:
        """The answer as the assistant turn, then one user turn answering each of its calls."""
        results = [{"type": "tool_result", "tool_use_id": a.call.id, "content": a.text,
                    **({"is_error": True} if a.error else {})} for a in answered]
        return [{"role": "assistant", "content": answer.raw.get("content") or []},
                {"role": "user", "content": results}]

    def assistant_turns(self, conversation: Sequence[Json]) -> int:
        """The assistant turns so far."""
        return sum(1 for m in conversation if m.get("role") == "assistant")

    def call_ids(self, item: Json) -> tuple[str, ...]:
        """The ``tool_use`` ids of an assistant turn."""
        content = item.get("content") if item.get("role") == "assistant" else None
        if not isinstance(content, list):
            return ()
        return tuple(str(b.get("id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_use")

    def agent_results(self, conversation: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool],
                      earlier: Callable[[str], HandedOut | None]) -> list[tuple[Any, AgentResult]]:
        """The agent's ``tool_result`` blocks (messages_results.py)."""
        return agent_results(conversation, sent, tools, earlier)

    def with_screened(self, conversation: Sequence[Json], found: Sequence[tuple[Any, AgentResult]],
                      screened: Sequence[Screened]) -> list[Json]:
        """The screened results in place (messages_results.py)."""
        return with_screened(conversation, found, screened)

    def whole(self, reply: Reply) -> Json:
        """The agent's ``Message``."""
        raw = reply.answer.raw if reply.answer is not None else None
        if reply.text is not None or raw is None:
            return {**text_message(reply.model, reply.text or "", reply.usage, raw), EXTENSION: reply.extension}
        returned = {call.id: args for call, args in reply.returned}
        content = [{**b, "input": returned[b["id"]]} if b.get("type") == "tool_use" else b
                   for b in raw.get("content") or [] if b.get("type") != "tool_use" or b.get("id") in returned]
        stop = "tool_use" if returned else raw.get("stop_reason") or "end_turn"
        return {**raw, "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
                "usage": with_counts(reply.usage), EXTENSION: reply.extension}

    def stream(self, request: AgentRequest) -> AgentStream:
        """A new agent stream (messages_stream.py)."""
        return MessagesStream(request.model)

    def add_usage(self, total: Json | None, usage: Json | None) -> Json | None:
        """Summed in the API's keys."""
        return add_usage(total, usage)

    def error_body(self, status: int, code: str, message: str) -> Json:
        """In the API's error format (messages_wire.py)."""
        return error_body(status, code, message)


DIALECT = MessagesDialect()
