"""One model answer decided: every tool call through the pipeline, and what the answer becomes.

The agent's own tools first, in order (a terminate refuses the rest), through ``Gateway.decide``, which
runs nothing; then, when no agent call is returned, the gateway's tools concurrently through
``Gateway.call``, which runs them. Admitted agent-run calls go back to the agent with the admitted
arguments; refused, skipped, unknown and gateway-run calls are answered here; terminate, a pending
approval and an approved call already handed out (never given twice: it is the execution) end the
response with a message. Nothing here knows a wire format (gateway/models/dialects/).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from gateway.core.errors import UnknownToolError
from gateway.models.conversation import Conversation
from gateway.models.dialects.base import Answered, Json, ModelAnswer, ToolCall
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.request import CallOutcome
from gateway.pipeline.results import HANDED_OUT

__all__ = ["AWAITS_APPROVAL", "Decided", "decide_answer"]

AWAITS_APPROVAL = "{message} (Send the same request again once it is decided.)"
# What the model reads of a gateway tool's call left unrun because the agent got calls of the same turn to run.
NOT_RUN = "Not run: the other calls of this turn went to the agent first. Call it again if it is still needed."

# A call in one of these states ends the agent's response with its message (the turn's other calls are not given).
_ENDS_TURN = ("terminated", "pending", "handed_out")


def _unknown(name: str) -> str:
    return f"Error: there is no tool named {name!r}. Call only the tools you were given."


@dataclass(slots=True)
class _Call:
    """One tool call of a model turn and what became of it."""

    call: ToolCall
    outcome: CallOutcome | None = None
    answer: str | None = None  # the tool result the model gets, when resolved here
    args: Json | None = None  # admitted: the arguments the agent gets
    status: str = "not_run"  # returned | answered | pending | handed_out | terminated | not_run


@dataclass(frozen=True, slots=True)
class Decided:
    """What an answer with tool calls became: calls for the agent, a text for it, or (neither) asked again."""

    returned: list[tuple[ToolCall, Json]]
    text: str | None
    iteration: int
    answered: list[Answered] = field(default_factory=list)  # with ``returned``: the other calls, answered here

    @property
    def final(self) -> bool:
        """The agent gets a response now."""
        return bool(self.returned) or self.text is not None


async def decide_answer(gateway: Gateway, conversation: Conversation, answer: ModelAnswer) -> Decided:
    """Decide every call of ``answer`` (see the module docstring); when every call was answered here, the
    exchange is appended to the conversation for the next model request."""
    iteration = 1 + conversation.dialect.assistant_turns(conversation.items)
    calls = [_Call(c) for c in answer.calls]
    for call in calls:  # the agent's own tools first, in order: a terminate refuses the rest
        if call.call.name not in conversation.gateway:
            await _decide(gateway, conversation, call, iteration)
    ended = next((c for c in calls if c.status in _ENDS_TURN), None)
    if ended is None and not any(c.status == "returned" for c in calls):
        limit = asyncio.Semaphore(conversation.route.tool_concurrency)

        async def run(call: _Call) -> None:
            async with limit:
                await _decide(gateway, conversation, call, iteration)

        await asyncio.gather(*(run(c) for c in calls if c.call.name in conversation.gateway))
        ended = next((c for c in calls if c.status in _ENDS_TURN), None)
    conversation.report.extend(_report(c, iteration) for c in calls)
    if ended is not None:
        assert ended.outcome is not None
        text = AWAITS_APPROVAL.format(message=ended.outcome.text) if ended.status == "pending" else \
            ended.outcome.text
        return Decided([], text, iteration)
    returned = [(c.call, c.args or {}) for c in calls if c.status == "returned"]
    if returned:
        return Decided(returned, None, iteration, [
            Answered(c.call, c.answer or NOT_RUN,
                     c.outcome is None or c.outcome.is_error) for c in calls if c.status in ("answered", "not_run")])
    exchange = conversation.dialect.exchange(answer, [
        Answered(c.call, c.answer or "", c.outcome is None or c.outcome.is_error) for c in calls])
    conversation.items.extend(exchange)
    conversation.resolved.extend(exchange)
    conversation.last, conversation.new = answer, exchange
    return Decided([], None, iteration)


async def _decide(gateway: Gateway, conversation: Conversation, call: _Call, iteration: int) -> None:
    """One call through the pipeline; sets its status and what the model or the agent gets."""
    name = call.call.name
    client = conversation.client.get(name)
    if client is None and name not in conversation.gateway:
        call.status, call.answer = "answered", _unknown(name)
        return
    caller = conversation.caller
    request = CallRequest(
        tool=name, arguments=call.call.arguments, principal=caller.principal, session_id=caller.run.id,
        run_client=caller.run.client, call_id=call.call.id, iteration=iteration, frontend="model",
        wait_seconds=conversation.route.approval_wait, refused=call.call.refused, exposed=client,
        # Models make up a new id each time they are asked: a retry of a held call is the same run,
        # tool and arguments (gateway/approvals/gate.py), as for MCP clients that give no id.
        call_id_given=False, caller_token=caller.token,
    )
    try:  # an agent-run tool is only decided (nothing runs here); a gateway tool runs
        outcome = call.outcome = await (gateway.call(request) if client is None else gateway.decide(request))
    except UnknownToolError:  # the tool went away since the request was read
        call.status, call.answer = "answered", _unknown(name)
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


def _tool_text(outcome: CallOutcome) -> str:
    """A tool result's text: the text blocks, else the structured result as JSON."""
    if outcome.text:
        return outcome.text
    return json.dumps(outcome.structured, ensure_ascii=False) if outcome.structured is not None else ""


def _report(call: _Call, iteration: int) -> Json:
    outcome = call.outcome
    entry: Json = {"id": call.call.id, "tool": call.call.name, "iteration": iteration, "status": call.status,
                   "decision": outcome.decision if outcome is not None else
                   ("unknown_tool" if call.status == "answered" else "not_run")}
    if outcome is not None and outcome.meta.get("gateway/rewritten"):
        entry["rewritten"] = True
    if call.status in ("answered", *_ENDS_TURN):
        entry["message"] = call.answer if outcome is None else outcome.text
    if outcome is not None and outcome.pending_approval is not None:
        entry["approval_id"] = outcome.pending_approval
    return entry
