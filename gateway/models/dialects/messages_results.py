"""The results of the agent's own tools in a Messages conversation, read for the response stage and replaced.

Each ``tool_result`` block of a user turn the agent sent is matched by its ``tool_use_id`` to a ``tool_use``
block of an earlier assistant turn (or, failing that, to a call the gateway handed out in this run), which
names the tool and its arguments; one whose tool is among this request's agent-run tools is screened
(gateway/pipeline/agent_results.py). Its text is the block's ``content``: a string, or its text blocks
joined. A screened result the model reads instead replaces that content; one a rule refused also says
``is_error: true``. Every other block goes to the model as sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.models.dialects.base import HandedOut, Json, content_text
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = ["agent_results", "with_screened"]

_READ_AS_SENT = "allow"  # a screened result with this decision is the tool's result, not a refusal


def _blocks(message: Json, kind: str) -> list[tuple[int, Json]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [(i, b) for i, b in enumerate(content) if isinstance(b, dict) and b.get("type") == kind]


def agent_results(conversation: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool],
                  earlier: Callable[[str], HandedOut | None]) -> list[tuple[Any, AgentResult]]:
    """The results of agent-run tools among ``sent`` (by identity), each located by (turn, block) index."""
    agents = {id(m) for m in sent}
    calls: dict[str, HandedOut] = {}
    turn = 0
    found: list[tuple[Any, AgentResult]] = []
    for index, message in enumerate(conversation):
        if message.get("role") == "assistant":
            turn += 1
            for _, block in _blocks(message, "tool_use"):
                if isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
                    value = block.get("input")
                    calls[block["id"]] = HandedOut(block["name"], value if isinstance(value, dict) else {}, turn)
            continue
        if id(message) not in agents:
            continue
        for position, block in _blocks(message, "tool_result"):
            call_id = block.get("tool_use_id")
            call = (calls.get(call_id) or earlier(call_id)) if isinstance(call_id, str) else None
            if call is None or call.name not in tools:
                continue
            assert isinstance(call_id, str)
            found.append(((index, position), AgentResult(call_id, tools[call.name], call.arguments,
                                                         content_text(block.get("content")), call.iteration)))
    return found


def with_screened(conversation: Sequence[Json], found: Sequence[tuple[Any, AgentResult]],
                  screened: Sequence[Screened]) -> list[Json]:
    """The conversation with each screened result's content replaced by what the model reads instead."""
    out = list(conversation)
    for ((index, position), _), entry in zip(found, screened, strict=False):  # a terminate leaves the rest
        if entry.content is None:
            continue
        content = list(out[index]["content"])
        refused = {"is_error": True} if entry.decision != _READ_AS_SENT else {}
        content[position] = {**content[position], "content": entry.content, **refused}
        out[index] = {**out[index], "content": content}
    return out
