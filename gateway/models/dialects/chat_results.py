"""The results of the agent's own tools in the chat conversation it sends, read for the response stage and replaced.

Each ``role: tool`` message the agent sent is matched by its ``tool_call_id`` to the tool call of an earlier
assistant message, which names the tool and its arguments; one whose call names a tool of this request's
``tools`` (an agent-run tool) is screened (gateway/pipeline/agent_results.py). Every other message goes to the
model as sent, as before the response stage ran on agent results: a tool message that answers no tool call
(the model's API refuses the conversation then), one whose call names a tool the request does not offer, and
the exchanges the gateway put back (gateway/models/splices.py: it made those itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.models.dialects.base import Json, as_object, call_arguments, content_text, replaced_results
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = ["sent_results", "with_screened"]


def sent_results(messages: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool]
                 ) -> list[tuple[int, AgentResult]]:
    """The results of agent-run tools among ``sent`` (the agent's own messages), with their index in ``messages``
    (the conversation as the model gets it); the iteration is the assistant turn of the call (1-based)."""
    agents = {id(m) for m in sent}
    calls: dict[str, tuple[str, Any, int]] = {}
    turn = 0
    found: list[tuple[int, AgentResult]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            turn += 1
            raw_calls = message.get("tool_calls")
            for raw in raw_calls if isinstance(raw_calls, list) else ():
                function = as_object(as_object(raw).get("function"))
                if isinstance(raw.get("id"), str) and isinstance(function.get("name"), str):
                    calls[raw["id"]] = (function["name"], function.get("arguments"), turn)
        elif role == "tool" and id(message) in agents:
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in calls or calls[call_id][0] not in tools:
                continue
            name, raw_arguments, iteration = calls[call_id]
            # Arguments the agent garbled (the gateway handed them out as a JSON object) read as {}: the result
            # is still screened.
            arguments, _ = call_arguments(raw_arguments)
            found.append((index, AgentResult(call_id, tools[name], arguments, content_text(message.get("content")),
                                             iteration)))
    return found


def with_screened(messages: Sequence[Json], found: Sequence[tuple[int, AgentResult]],
                  screened: Sequence[Screened]) -> list[Json]:
    """The conversation with each screened result's ``content`` replaced by what the model reads instead."""
    return replaced_results(messages, found, screened, "content")
