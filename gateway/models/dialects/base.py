"""The seam between the model proxy's loop and one model API: the neutral types and the ``Dialect`` protocol.

The loop (gateway/models/proxy.py) asks the model, decides every tool call and answers what the agent must
not see; it knows no wire format. A dialect (chat completions, OpenAI Responses, Anthropic Messages) reads
the agent's request and the model's answers into these types and writes the next model request and the
agent's response back in its API's shape. A dialect does no I/O: the upstream (gateway/models/upstream.py)
sends what it writes, at its ``path``, with its headers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.core.values import loads
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = [
    "EXTENSION",
    "AgentRequest",
    "AgentStream",
    "Answered",
    "Dialect",
    "HandedOut",
    "Json",
    "ModelAnswer",
    "Reply",
    "RequestProblem",
    "ToolCall",
    "as_object",
    "call_arguments",
    "content_text",
    "new_call_id",
    "offered_body",
    "replaced_results",
    "sse",
]

Json = dict[str, Any]

EXTENSION = "gateway"  # the response's extension field: what the gateway resolved


class RequestProblem(ValueError):
    """The agent's request cannot be served as sent (a 400 in the endpoint's error format, naming why)."""


@dataclass(slots=True)
class ToolCall:
    """One tool call the model made (chat: ``tool_calls[].id``; responses: a ``function_call``'s ``call_id``;
    messages: a ``tool_use`` block's ``id``)."""

    id: str  # never empty: the dialect makes one up (new_call_id) when the model gave none
    name: str  # "" when the model gave none (answered as an unknown tool)
    arguments: Json  # parsed; {} when refused
    refused: str | None  # why the arguments cannot be read; the pipeline then refuses the call
    raw: Json  # the call as it appeared in the answer


@dataclass(slots=True)
class ModelAnswer:
    """One upstream answer, whole or assembled from its stream."""

    raw: Json  # the answer in the API's own shape (chat: a chat.completion with its message normalised)
    calls: list[ToolCall]  # in the order the model made them
    finish: str  # the API's own stop reason
    usage: Json | None  # this answer's usage, in the API's keys


@dataclass(slots=True)
class AgentRequest:
    """The agent's request as the proxy serves it."""

    model: str  # the name the agent asked for
    conversation: list[Json]  # the API's items in order (chat/messages: ``messages``; responses: ``input``)
    tools: dict[str, ExposedTool]  # the agent's own function tools
    body: Json  # the request as sent
    stream: bool
    headers: Mapping[str, str] = field(default_factory=dict)  # the agent's request headers (lower-case names)


@dataclass(frozen=True, slots=True)
class Answered:
    """A call the gateway answered itself, and what the model reads as its result."""

    call: ToolCall
    text: str
    error: bool  # refused, unknown, invalid arguments, a failed gateway tool; not a skip's result


@dataclass(frozen=True, slots=True)
class HandedOut:
    """A call the gateway returned to the agent in this run (for results whose call the conversation lacks)."""

    name: str
    arguments: Json
    iteration: int


@dataclass(slots=True)
class Reply:
    """What the agent gets: the model's last answer with only the returned calls, or a gateway text."""

    model: str  # the name the agent asked for
    answer: ModelAnswer | None  # the model's last answer (None: the model was never asked)
    returned: list[tuple[ToolCall, Json]]  # calls the agent runs, with the admitted (maybe rewritten) arguments
    text: str | None  # a gateway message instead of the answer (terminate, pending approval, turns exhausted)
    usage: Json | None  # summed over every model request, in the API's keys
    extension: Json  # the ``gateway`` field
    answered: list[Answered] = field(default_factory=list)  # the answer's calls answered here, unseen by the agent


class AgentStream(Protocol):
    """One agent stream, over every model request of its agent request."""

    def turn(self) -> None:
        """A model request starts: the per-answer assembly starts afresh."""

    def add(self, event: Json) -> list[bytes]:
        """One upstream event; the SSE bytes the agent gets at once (text, re-indexed; never a tool call)."""

    def answer(self) -> ModelAnswer:
        """This turn's answer, assembled (``ModelUpstreamError`` on a shape that could hide a call)."""

    def close(self, reply: Reply) -> list[bytes]:
        """The closing events: what is still to say (decided calls, a gateway text), finish, usage, extension."""

    def error(self, code: str, message: str) -> bytes:
        """The event that ends the stream when the upstream fails midway."""


class Dialect(Protocol):
    """One model API, pure (no I/O); each dialect module defines one as ``DIALECT``."""

    api: str  # "chat" | "responses" | "messages"
    path: str  # appended to base_url; the gateway serves "/v1" + path

    def upstream_headers(self, api_key: str | None) -> dict[str, str]:
        """The fixed headers of every upstream request (the key)."""

    def passed_headers(self, agent: Mapping[str, str]) -> dict[str, str]:
        """The agent's headers passed on to the upstream, per request."""

    def read_request(self, body: Json, headers: Mapping[str, str]) -> AgentRequest:
        """The agent's request (``body["model"]`` is a non-empty string); ``RequestProblem`` naming what is wrong."""

    def conversation_key(self, body: Json) -> Any:
        """What names the conversation for the implicit run (gateway.pipeline.runs.conversation_of reads it)."""

    def offer(self, request: AgentRequest, model: str, gateway_tools: Sequence[ExposedTool]) -> Json:
        """The body every model request starts from: the model mapped, no ``stream``, gateway tools added."""

    def model_request(self, base: Json, conversation: list[Json], last: ModelAnswer | None,
                      new: list[Json]) -> Json:
        """The next model request: ``last`` is this agent request's previous answer, ``new`` the items since."""

    def read_answer(self, answer: Json) -> ModelAnswer:
        """A whole upstream answer (``ModelUpstreamError`` on a shape that could hide a call)."""

    def exchange(self, answer: ModelAnswer, answered: Sequence[Answered]) -> list[Json]:
        """The items appended to the conversation when the gateway answered every call of ``answer``."""

    def assistant_turns(self, conversation: Sequence[Json]) -> int:
        """The model turns in the conversation so far (a call's ``iteration`` is this plus one)."""

    def call_ids(self, item: Json) -> tuple[str, ...]:
        """The tool-call ids one conversation item carries (splices are put back before it)."""

    def agent_results(self, conversation: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool],
                      earlier: Callable[[str], HandedOut | None]) -> list[tuple[Any, AgentResult]]:
        """The agent's own tool results among ``sent`` (by identity), each with a locator ``with_screened`` reads."""

    def with_screened(self, conversation: Sequence[Json], found: Sequence[tuple[Any, AgentResult]],
                      screened: Sequence[Screened]) -> list[Json]:
        """The conversation with each screened result replaced by what the model reads instead."""

    def whole(self, reply: Reply) -> Json:
        """The agent's whole response, the ``gateway`` field at its top level."""

    def stream(self, request: AgentRequest) -> AgentStream:
        """A new agent stream for this request."""

    def add_usage(self, total: Json | None, usage: Json | None) -> Json | None:
        """Token counts summed, in the API's own keys."""

    def error_body(self, status: int, code: str, message: str) -> Json:
        """An error in the API's own error format."""


def offered_body(request: AgentRequest, model: str, gateway_tools: Sequence[Json],
                 drop: Sequence[str] = ("stream",)) -> Json:
    """The agent's body as the model gets it: the upstream's model name, without the fields in ``drop`` (the
    gateway asks whole), and the gateway's tools (in the API's own tool shape) after the agent's own."""
    body = {k: v for k, v in request.body.items() if k not in drop}
    body["model"] = model
    if gateway_tools:
        body["tools"] = [*(request.body.get("tools") or []), *gateway_tools]
    return body


def as_object(value: Any) -> Json:
    """A JSON object as read, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def new_call_id() -> str:
    """An id for a tool call the model gave none."""
    return f"call_{uuid.uuid4().hex[:24]}"


def call_arguments(raw: Any) -> tuple[Json, str | None]:
    """A tool call's arguments text parsed, or {} and why it cannot be read (the pipeline then refuses the call)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # some models send no arguments for a tool that takes none
    if not isinstance(raw, str):
        return {}, "the arguments are not a JSON text"
    try:
        value = loads(raw)
    except ValueError as exc:
        return {}, f"the arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return {}, "the arguments are not a JSON object"
    return value, None


def content_text(content: Any) -> str:
    """A message's content as the text a rule reads: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def sse(data: Json, event: str | None = None) -> bytes:
    """One Server-Sent Event of JSON data, named when ``event`` is given."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def replaced_results(conversation: Sequence[Json], found: Sequence[tuple[int, Any]], screened: Sequence[Any],
                     field: str) -> list[Json]:
    """The conversation with each screened result's ``field`` (the item at the index found) replaced by what the
    model reads instead; a terminate leaves the rest unscreened, so ``screened`` may be the shorter."""
    out = list(conversation)
    for (index, _), entry in zip(found, screened, strict=False):
        if entry.content is not None:
            out[index] = {**out[index], field: entry.content}
    return out
