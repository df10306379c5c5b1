"""The model proxy's loop: ask the model, decide every tool call it makes, resolve what the agent must not see.

    agent request → put back earlier resolved exchanges (splices.py) → (run terminated? answer so, no model
    call) → the results of the agent's own tools through the response stage (tool_results.py: the model
    reads them as the rules leave them; a terminate ends the run, answered so) → ask the model → per tool
    call: the pipeline decides it (agent-run tools, client_tools.py, through ``Gateway.decide``, which runs
    nothing; gateway tools through ``Gateway.call``, which runs them) → admitted agent-run calls go back to
    the agent with the admitted arguments; refused, skipped, unknown and gateway-run calls are answered here
    and the model is asked again (at most ``max_turns`` times); terminate, a pending approval and an approved
    call already handed out (never given twice: it is the execution) end the response with a message.

Both the whole response (``complete``) and the streamed one (``stream``) run the same ``_turn``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.errors import UnknownToolError
from gateway.core.globs import glob_match
from gateway.core.limits import MODEL_SPLICES_KEPT
from gateway.models.answer import StreamedMessage, as_object, assistant_message, call_arguments
from gateway.models.client_tools import client_tools, function_tool, undeclared_tools
from gateway.models.completion import add_usage, closing, completion, sse_event, text_message
from gateway.models.splices import Splices
from gateway.models.tool_results import sent_results, with_screened
from gateway.models.upstream import ModelUpstream
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.agent_results import AgentResults
from gateway.pipeline.request import CallOutcome
from gateway.pipeline.results import HANDED_OUT
from gateway.pipeline.runs import Run
from gateway.policy.call import Principal
from gateway.upstreams.registry import ExposedTool

__all__ = ["Caller", "ModelProxy", "ModelRoute", "RequestProblem", "UnknownModel"]

Json = dict[str, Any]

TURNS_EXHAUSTED = ("The gateway stopped asking the model after {n} requests: its tool calls kept being answered by "
                   "the gateway. Try again with a different request.")
AWAITS_APPROVAL = "{message} (Send the same request again once it is decided.)"


# A call in one of these states ends the agent's response with its message (the turn's other calls are not given).
_ENDS_TURN = ("terminated", "pending", "handed_out")


def _unknown(name: str) -> str:
    return f"Error: there is no tool named {name!r}. Call only the tools you were given."


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """One `models:` entry, as plain values."""

    name: str  # a glob over the model names agents ask for
    upstream: ModelUpstream
    model: str | None = None
    gateway_tools: tuple[str, ...] = ()
    tool_concurrency: int = 4
    max_turns: int = 8
    approval_wait: float = 300.0  # 0: answer "awaits approval" at once
    client_tools: tuple[str, ...] | None = None  # the agent tools the model may be offered (globs); None: any


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, in which run, and how the run's client is named."""

    principal: Principal
    run: Run
    token: str | None = field(default=None, repr=False, compare=False)  # Identity.token, for token exchange


class RequestProblem(ValueError):
    """The agent's request cannot be served as sent (a 400 naming why)."""


class UnknownModel(LookupError):
    """No `models:` entry serves the model the agent asked for (a 404)."""


@dataclass(slots=True)
class _Call:
    """One tool call of a model turn and what became of it."""

    id: str
    name: str
    raw: Json
    outcome: CallOutcome | None = None
    answer: str | None = None  # the tool message the model gets, when resolved here
    args: Json | None = None  # admitted: the arguments the agent gets
    status: str = "not_run"  # returned | answered | pending | handed_out | terminated | not_run


@dataclass(slots=True)
class _Turn:
    """What one assistant message becomes: the agent's final message, or (not final) the model is asked again."""

    message: Json
    finish: str
    final: bool


@dataclass(slots=True)
class _Conversation:
    """One agent request being served."""

    caller: Caller
    route: ModelRoute
    body: Json  # what goes to the model (model name mapped, gateway tools added)
    messages: list[Json]
    client: dict[str, ExposedTool]
    gateway: dict[str, ExposedTool]
    requested_model: str
    sent: list[Json] = field(default_factory=list)  # the agent's own messages (``messages`` adds splices)
    report: list[Json] = field(default_factory=list)
    results: list[Json] = field(default_factory=list)  # what became of the agent's results the rules read
    resolved: list[Json] = field(default_factory=list)  # this request's exchanges the agent does not see
    model_requests: int = 0

    def extension(self) -> Json:
        """The response's extension field."""
        return {"run": self.caller.run.id, "model_requests": self.model_requests, "calls": self.report,
                **({"results": self.results} if self.results else {})}

    def completion(self, message: Json, finish: str, usage: Json | None, answer: Json | None = None) -> Json:
        """The agent's whole chat completion."""
        return completion(self.requested_model, self.extension(), message, finish, usage, answer)


class ModelProxy:
    """Serves chat completions for the configured model routes through one pipeline."""

    def __init__(self, gateway: Gateway, routes: Sequence[ModelRoute]) -> None:
        self.gateway = gateway
        self.routes = list(routes)
        self.splices = Splices(MODEL_SPLICES_KEPT)
        self.results = AgentResults(gateway)

    async def close(self) -> None:
        """Close every model upstream's connections."""
        for route in self.routes:
            await route.upstream.close()

    def _start(self, body: Json, caller: Caller) -> _Conversation:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestProblem("'model' must be a model name")
        route = next((r for r in self.routes if glob_match(model, r.name)), None)
        if route is None:
            raise UnknownModel(model)
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise RequestProblem("'messages' must be a list of message objects")
        if body.get("functions") is not None or body.get("function_call") is not None:
            raise RequestProblem("the legacy 'functions' API is not served: send 'tools'")
        if body.get("n") not in (None, 1):
            raise RequestProblem("only one choice per request ('n': 1) is served")
        client = client_tools(body.get("tools"))
        if isinstance(client, str):
            raise RequestProblem(client)
        undeclared = undeclared_tools(client, route.client_tools)
        if undeclared:
            raise RequestProblem(f"the agent's tools {', '.join(map(repr, undeclared))} are not among this model's"
                                 " client_tools in the gateway's configuration")
        gateway = {t.name: t for t in self.gateway.usable_tools(caller.principal, None)  # no client to ask
                   if t.name not in client and any(glob_match(t.name, g) for g in route.gateway_tools)}
        upstream_body = {**body, "model": route.model or model}
        upstream_body.pop("stream", None)
        if gateway:
            upstream_body["tools"] = [*(body.get("tools") or []), *(function_tool(t) for t in gateway.values())]
        expanded = self.splices.expand(caller.principal.key, caller.run.id, messages)
        return _Conversation(caller, route, upstream_body, expanded, client, gateway, model, messages)

    async def _opening(self, conversation: _Conversation) -> str | None:
        """What the agent reads instead of an answer when the run was terminated, or a result it sent back ends the
        run (then the model is not asked); else None, with the agent's results screened (tool_results.py)."""
        caller = conversation.caller
        ended = await self.gateway.run_ended(caller.principal.key, caller.run, "This run was terminated.")
        found = sent_results(conversation.messages, conversation.sent, conversation.client) if ended is None else []
        if not found:
            return ended
        screened = await self.results.screen(caller.principal, caller.run, [result for _, result in found])
        conversation.messages = with_screened(conversation.messages, found, screened)
        conversation.results = [entry.report() for entry in screened if entry.checked]
        return next((entry.ended for entry in screened if entry.ended is not None), None)

    async def complete(self, body: Json, caller: Caller) -> Json:
        """A whole chat completion for the agent."""
        conversation = self._start(body, caller)
        ended = await self._opening(conversation)
        if ended is not None:
            return conversation.completion(text_message(ended), "stop", None)
        usage: Json | None = None
        answer: Json = {}
        for _ in range(conversation.route.max_turns):
            answer = await conversation.route.upstream.complete({**conversation.body,
                                                                 "messages": conversation.messages})
            conversation.model_requests += 1
            usage = add_usage(usage, answer.get("usage"))
            choice = answer["choices"][0] if isinstance(answer["choices"][0], dict) else {}
            message = as_object(choice.get("message"))
            turn = await self._turn(conversation, {**message, "role": "assistant"},
                                    str(choice.get("finish_reason") or "stop"))
            if turn.final:
                return conversation.completion(turn.message, turn.finish, usage, answer)
        exhausted = TURNS_EXHAUSTED.format(n=conversation.route.max_turns)
        return conversation.completion(text_message(exhausted), "stop", usage, answer)

    async def stream(self, body: Json, caller: Caller) -> AsyncIterator[bytes]:
        """The chat completion as Server-Sent Events: text at once, tool calls once decided."""
        conversation = self._start(body, caller)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) \
            if isinstance(body.get("stream_options"), dict) else False
        head: Json = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                      "created": int(time.time()), "model": conversation.requested_model}
        ended = await self._opening(conversation)
        if ended is not None:
            for event in closing(head, conversation.extension(), text_message(ended), "stop", None, include_usage):
                yield event
            return
        usage: Json | None = None
        for _ in range(conversation.route.max_turns):
            streamed = StreamedMessage()
            finish = "stop"
            stream = conversation.route.upstream.stream({**conversation.body, "messages": conversation.messages})
            conversation.model_requests += 1
            async for chunk in stream:
                head.update({k: chunk[k] for k in ("id", "created", "model", "system_fingerprint") if k in chunk})
                usage = add_usage(usage, chunk.get("usage"))
                choices = chunk.get("choices")
                if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
                    continue
                if choices[0].get("finish_reason"):
                    finish = str(choices[0]["finish_reason"])
                passed = streamed.add(as_object(choices[0].get("delta")))
                if passed:  # text deltas stream through at once
                    yield sse_event({**head, "choices": [{"index": 0, "delta": passed, "finish_reason": None,
                                                       "logprobs": None}]})
            message = streamed.message()
            turn = await self._turn(conversation, message, finish)
            if turn.final:
                said = "".join(streamed.text)
                shown = {k: v for k, v in turn.message.items() if k != "content" or v != (said or None)}
                for event in closing(head, conversation.extension(), shown, turn.finish, usage, include_usage):
                    yield event
                return
        exhausted = text_message(TURNS_EXHAUSTED.format(n=conversation.route.max_turns))
        for event in closing(head, conversation.extension(), exhausted, "stop", usage, include_usage):
            yield event

    async def _turn(self, conversation: _Conversation, message: Json, finish: str) -> _Turn:
        """Decide every tool call of one assistant message (see the module docstring)."""
        message = assistant_message(message)
        raw_calls = message.get("tool_calls")
        if not isinstance(raw_calls, list) or not raw_calls:
            self._keep_splice(conversation, message)
            return _Turn(message, finish, True)
        iteration = 1 + sum(1 for m in conversation.messages if m.get("role") == "assistant")
        calls = [_read_call(raw) for raw in raw_calls]
        message = {**message, "tool_calls": [{**c.raw, "id": c.id} for c in calls]}  # every call has an id
        for call in calls:  # the agent's own tools first, in order: a terminate refuses the rest
            if call.name not in conversation.gateway:
                await self._decide(conversation, call, iteration)
        ended = next((c for c in calls if c.status in _ENDS_TURN), None)
        if ended is None and not any(c.status == "returned" for c in calls):
            limit = asyncio.Semaphore(conversation.route.tool_concurrency)

            async def run(call: _Call) -> None:
                async with limit:
                    await self._decide(conversation, call, iteration)

            await asyncio.gather(*(run(c) for c in calls if c.name in conversation.gateway))
            ended = next((c for c in calls if c.status in _ENDS_TURN), None)
        conversation.report.extend(_report(c, iteration) for c in calls)
        if ended is not None:
            assert ended.outcome is not None
            text = AWAITS_APPROVAL.format(message=ended.outcome.text) if ended.status == "pending" else \
                ended.outcome.text
            return _Turn(text_message(text), "stop", True)
        returned = [c for c in calls if c.status == "returned"]
        if returned:
            final = {**message, "tool_calls": [_with_args(c) for c in returned]}
            self._keep_splice(conversation, final)
            return _Turn(final, "tool_calls", True)
        exchange = [message, *({"role": "tool", "tool_call_id": c.id, "content": c.answer or ""} for c in calls)]
        conversation.messages.extend(exchange)
        conversation.resolved.extend(exchange)
        return _Turn(message, finish, False)

    def _keep_splice(self, conversation: _Conversation, returned: Json) -> None:
        caller = conversation.caller
        self.splices.keep(caller.principal.key, caller.run.id, returned, conversation.resolved)

    async def _decide(self, conversation: _Conversation, call: _Call, iteration: int) -> None:
        """One call through the pipeline; sets its status and what the model or the agent gets."""
        client = conversation.client.get(call.name)
        if client is None and call.name not in conversation.gateway:
            call.status, call.answer = "answered", _unknown(call.name)
            return
        function = as_object(call.raw.get("function"))
        args, refused = call_arguments(function.get("arguments"))
        caller = conversation.caller
        request = CallRequest(
            tool=call.name, arguments=args, principal=caller.principal, session_id=caller.run.id,
            run_client=caller.run.client, call_id=call.id, iteration=iteration, frontend="model",
            wait_seconds=conversation.route.approval_wait, refused=refused, exposed=client,
            # Models make up a new id each time they are asked: a retry of a held call is the same run,
            # tool and arguments (gateway/approvals/gate.py), as for MCP clients that give no id.
            call_id_given=False, caller_token=caller.token,
        )
        try:  # an agent-run tool is only decided (nothing runs here); a gateway tool runs
            outcome = call.outcome = await (self.gateway.call(request) if client is None else
                                            self.gateway.decide(request))
        except UnknownToolError:  # the tool went away since the request was read
            call.status, call.answer = "answered", _unknown(call.name)
            return
        if outcome.meta.get("gateway/terminated"):
            call.status = "terminated"
        elif outcome.pending_approval is not None:
            call.status = "pending"
        elif outcome.meta.get(HANDED_OUT):  # a retry of an approved call the agent was already given
            call.status = "handed_out"
        elif client is not None and outcome.admitted is not None:
            call.status, call.args = "returned", outcome.admitted
        else:
            call.status, call.answer = "answered", _tool_text(outcome)


def _read_call(raw: Any) -> _Call:
    raw = raw if isinstance(raw, dict) else {}
    function = as_object(raw.get("function"))
    name = function.get("name")
    call_id = raw.get("id")
    return _Call(call_id if isinstance(call_id, str) and call_id else f"call_{uuid.uuid4().hex[:24]}",
                 name if isinstance(name, str) else "", raw)


def _with_args(call: _Call) -> Json:
    """A returned tool call, carrying the admitted (possibly rewritten) arguments."""
    function = as_object(call.raw.get("function"))
    return {**call.raw, "id": call.id, "type": "function",
            "function": {**function, "arguments": json.dumps(call.args, ensure_ascii=False)}}


def _tool_text(outcome: CallOutcome) -> str:
    """A tool message's content: the text blocks, else the structured result as JSON."""
    if outcome.text:
        return outcome.text
    return json.dumps(outcome.structured, ensure_ascii=False) if outcome.structured is not None else ""


def _report(call: _Call, iteration: int) -> Json:
    outcome = call.outcome
    entry: Json = {"id": call.id, "tool": call.name, "iteration": iteration, "status": call.status,
                   "decision": outcome.decision if outcome is not None else
                   ("unknown_tool" if call.status == "answered" else "not_run")}
    if outcome is not None and outcome.meta.get("gateway/rewritten"):
        entry["rewritten"] = True
    if call.status in ("answered", *_ENDS_TURN):
        entry["message"] = call.answer if outcome is None else outcome.text
    if outcome is not None and outcome.pending_approval is not None:
        entry["approval_id"] = outcome.pending_approval
    return entry
