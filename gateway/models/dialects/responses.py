"""OpenAI Responses (``POST /responses``): the API OpenAI's own agent SDKs speak by default.

The agent's ``input`` (a string is one user message) is the conversation; its ``function`` tools are its
own, the provider's hosted tools pass through, ``mcp`` and other tools whose calls no rule could read are
refused (responses_wire.py). ``instructions``, ``tool_choice``, ``parallel_tool_calls``, ``store``,
``previous_response_id`` and every other field go on as sent. When the gateway answered every call of an
answer itself, the answer's items and one ``function_call_output`` per call are appended; a storing upstream
(``store`` not false, or a conversation chained by ``previous_response_id``) gets only the outputs, chained
on the answer's id. What the agent reads is the model's last response with only the calls it runs
(responses_stream.py streams it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.models.dialects.base import (
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
from gateway.models.dialects.chat import ChatDialect
from gateway.models.dialects.responses_chain import chained_on, keep_unseen, unseen_on
from gateway.models.dialects.responses_stream import ResponsesStream
from gateway.models.dialects.responses_wire import (
    CALL,
    OUTPUT,
    add_usage,
    agent_results,
    client_tools,
    final_output,
    function_tool,
    model_turns,
    new_head,
    read_answer,
    response,
    with_screened,
)
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = ["DIALECT", "ResponsesDialect"]


def _input(body: Json) -> list[Json]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise RequestProblem("'input' must be a string or a list of input items")
    return value


def chains(body: Json) -> bool:
    """Whether the upstream keeps the conversation (the next turn goes by ``previous_response_id``)."""
    return body.get("previous_response_id") is not None or body.get("store") is not False


class ResponsesDialect:
    """The Responses dialect (gateway/models/dialects/base.py)."""

    api = "responses"
    path = "/responses"

    # OpenAI's own: the key as a Bearer token, none of the agent's headers on, OpenAI's error shape.
    upstream_headers = ChatDialect.upstream_headers
    passed_headers = ChatDialect.passed_headers
    error_body = ChatDialect.error_body

    def read_request(self, body: Json, headers: Mapping[str, str]) -> AgentRequest:
        """``input`` and the tools; a ``conversation`` object (kept by the provider, unseen here) is refused."""
        if body.get("conversation") is not None:
            raise RequestProblem("'conversation' is not served: the provider would keep tool calls no policy "
                                 "sees; send 'input' (and 'previous_response_id')")
        conversation = _input(body)
        tools = client_tools(body.get("tools"))
        if isinstance(tools, str):
            raise RequestProblem(tools)
        return AgentRequest(str(body["model"]), conversation, tools, body, body.get("stream") is True, headers)

    def conversation_key(self, body: Json) -> Any:
        """The instructions and the input."""
        try:
            items = _input(body)
        except RequestProblem:
            items = []
        return [{"role": "system", "content": body.get("instructions")}, *items]

    def offer(self, request: AgentRequest, model: str, gateway_tools: Sequence[ExposedTool]) -> Json:
        """The agent's body with the upstream's model name and the gateway's tools."""
        body = offered_body(request, model, [function_tool(t) for t in gateway_tools], ("stream", "stream_options"))
        if body.get("previous_response_id") is not None:
            body["previous_response_id"] = chained_on(body["previous_response_id"])
        return body

    def model_request(self, base: Json, conversation: list[Json], last: ModelAnswer | None,
                      new: list[Json]) -> Json:
        """The whole conversation, or (a storing upstream, after the first) the outputs chained on ``last``."""
        if last is None or not chains(base):  # the first request: on a chain, first what the agent never saw
            return {**base, "input": [*unseen_on(base.get("previous_response_id")), *conversation]}
        said = last.raw.get("output") or []
        return {**base, "previous_response_id": last.raw.get("id"), "input": [i for i in new if i not in said]}

    def read_answer(self, answer: Json) -> ModelAnswer:
        """A response's items, every function_call a call."""
        return read_answer(answer)

    def exchange(self, answer: ModelAnswer, answered: Sequence[Answered]) -> list[Json]:
        """The answer's items, then one function_call_output per call."""
        return [*answer.raw["output"], *({"type": OUTPUT, "call_id": a.call.id, "output": a.text} for a in answered)]

    def assistant_turns(self, conversation: Sequence[Json]) -> int:
        """The runs of items the model wrote."""
        return model_turns(conversation)

    def call_ids(self, item: Json) -> tuple[str, ...]:
        """A function_call item's call_id."""
        call_id = item.get("call_id")
        return (call_id,) if item.get("type") == CALL and isinstance(call_id, str) else ()

    def agent_results(self, conversation: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool],
                      earlier: Callable[[str], HandedOut | None]) -> list[tuple[Any, AgentResult]]:
        """The agent's function_call_output items for its own tools' calls (responses_wire.py)."""
        return list(agent_results(conversation, sent, tools, earlier))

    def with_screened(self, conversation: Sequence[Json], found: Sequence[tuple[Any, AgentResult]],
                      screened: Sequence[Screened]) -> list[Json]:
        """The outputs replaced."""
        return with_screened(conversation, found, screened)

    def whole(self, reply: Reply) -> Json:
        """A Responses response: the model's last one (a new one for a gateway text without an answer)."""
        head = reply.answer.raw if reply.answer is not None else new_head(reply.model)
        if reply.text is not None:  # not the upstream's answer: an id the upstream does not hold (its calls unanswered)
            head = {**head, "id": new_head(reply.model)["id"]}
        elif reply.answer is not None:
            keep_unseen(head.get("id"), reply.answered)
        return response(head, reply, final_output(reply))

    def stream(self, request: AgentRequest) -> AgentStream:
        """A streamed response."""
        return ResponsesStream(request.model)

    def add_usage(self, total: Json | None, usage: Json | None) -> Json | None:
        """``input_tokens``, ``output_tokens``, ``total_tokens`` and their details summed."""
        return add_usage(total, usage)


DIALECT = ResponsesDialect()
