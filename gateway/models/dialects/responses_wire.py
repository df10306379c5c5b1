"""OpenAI Responses' wire shapes: the agent's tools and results read, the model's answer read, the response written.

The agent's ``function`` tools are its own (the pipeline decides their calls); the provider's hosted tools
(web search, file search, code interpreter, image generation) pass through untouched: the provider runs
them and their items come back as the answer's items. A tool whose calls the agent would run without a
``function_call`` no rule reads (``custom``, computer use, a local shell) and an ``mcp`` tool, whose calls
the provider makes to the MCP server itself where no policy sees them, are refused.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.errors import ModelUpstreamError
from gateway.models.client_tools import agent_tool
from gateway.models.dialects.base import (
    EXTENSION,
    Json,
    ModelAnswer,
    Reply,
    ToolCall,
    as_object,
    call_arguments,
    new_call_id,
    replaced_results,
)
from gateway.pipeline.agent_results import AgentResult, Screened
from gateway.upstreams.registry import ExposedTool

__all__ = ["CALL", "OUTPUT", "add_usage", "agent_results", "client_tools", "final_output", "function_tool",
           "message_item", "model_turns", "new_head", "read_answer", "response", "returned_item", "text_of",
           "with_screened"]

CALL = "function_call"
OUTPUT = "function_call_output"

HOSTED = frozenset({"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                    "file_search", "code_interpreter", "image_generation"})
# The items an answer may hold besides function calls: text, reasoning, and the hosted tools' own calls.
_ANSWER_ITEMS = frozenset({"message", "reasoning", CALL, "web_search_call", "file_search_call",
                           "code_interpreter_call", "image_generation_call"})
_MODEL_ITEMS = _ANSWER_ITEMS  # items of the conversation the model wrote (a turn is a run of them)
_USAGE = ("input_tokens", "output_tokens", "total_tokens")
_DETAILS = {"input_tokens_details": ("cached_tokens", "cache_write_tokens"),
            "output_tokens_details": ("reasoning_tokens",)}


def client_tools(tools: Any) -> dict[str, ExposedTool] | str:
    """The request's function tools by name (hosted tools pass), or why the list cannot be served."""
    if tools is None:
        return {}
    if not isinstance(tools, list):
        return "'tools' must be a list"
    found: dict[str, ExposedTool] = {}
    for entry in tools:
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind in HOSTED:
            continue
        if kind == "mcp":
            return ("'mcp' tools are not served: the provider would call the MCP server itself, where no policy "
                    "sees the calls; serve that server's tools through the gateway instead")
        if kind != "function":
            return (f"tools of type {kind!r} are not served: only 'function' tools and the hosted "
                    f"{', '.join(sorted(HOSTED))} tools are")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            return "every function tool needs a name"
        found[name] = agent_tool(name, entry.get("description"), entry.get("parameters"))
    return found


def function_tool(tool: ExposedTool) -> Json:
    """A gateway tool as a Responses function tool."""
    return {"type": "function", "name": tool.name, "description": tool.spec.description,
            "parameters": tool.spec.input_schema, "strict": False}


def text_of(output: Any) -> str:
    """A function_call_output's output as text: a string, or its text parts joined."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    return ""


def _is_model_item(item: Json) -> bool:
    return item.get("type") in _MODEL_ITEMS and (item.get("type") != "message" or item.get("role") == "assistant")


def model_turns(conversation: Sequence[Json]) -> int:
    """The model's turns: runs of items the model wrote (assistant messages, function calls, reasoning...)."""
    turns, inside = 0, False
    for item in conversation:
        model = _is_model_item(item)
        turns += model and not inside
        inside = model
    return turns


def agent_results(conversation: Sequence[Json], sent: Sequence[Json], tools: Mapping[str, ExposedTool],
                  earlier: Any) -> list[tuple[int, AgentResult]]:
    """The agent's function_call_output items answering calls of its own tools: the call found in the
    conversation, else among the calls handed out in this run (the conversation chained upstream)."""
    agents = {id(item) for item in sent}
    calls: dict[str, tuple[str, Any, int]] = {}
    turn, inside = 0, False
    found: list[tuple[int, AgentResult]] = []
    for index, item in enumerate(conversation):
        model = _is_model_item(item)
        turn += model and not inside
        inside = model
        if item.get("type") == CALL and isinstance(item.get("call_id"), str) and isinstance(item.get("name"), str):
            calls[item["call_id"]] = (item["name"], item.get("arguments"), turn)
        elif item.get("type") == OUTPUT and id(item) in agents and isinstance(item.get("call_id"), str):
            call_id = item["call_id"]
            if call_id in calls:
                name, raw, iteration = calls[call_id]
                arguments, _ = call_arguments(raw)  # garbled by the agent: {} (the result is still screened)
            elif (handed := earlier(call_id)) is not None:
                name, arguments, iteration = handed.name, handed.arguments, handed.iteration
            else:
                continue
            if name in tools:
                found.append((index, AgentResult(call_id, tools[name], arguments, text_of(item.get("output")),
                                                 iteration)))
    return found


def with_screened(conversation: Sequence[Json], found: Sequence[tuple[int, AgentResult]],
                  screened: Sequence[Screened]) -> list[Json]:
    """The conversation with each screened result's ``output`` replaced by what the model reads instead."""
    return replaced_results(conversation, found, screened, "output")


def read_answer(answer: Json) -> ModelAnswer:
    """A Responses response: every function_call item a call (its call_id made up when missing)."""
    output = answer.get("output")
    if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
        raise ModelUpstreamError("the model upstream's response is not a Responses response (no 'output' list)")
    items, calls = [], []
    for item in output:
        kind = item.get("type")
        if kind not in _ANSWER_ITEMS:
            raise ModelUpstreamError(f"the model upstream's response holds a {kind!r} item, which could carry a "
                                     "tool call no policy decides")
        if kind == CALL:
            call_id, name = item.get("call_id"), item.get("name")
            arguments, refused = call_arguments(item.get("arguments"))
            call = ToolCall(call_id if isinstance(call_id, str) and call_id else new_call_id(),
                            name if isinstance(name, str) else "", arguments, refused, item)
            item = {**item, "call_id": call.id}
            call.raw = item
            calls.append(call)
        items.append(item)
    usage = answer.get("usage")
    return ModelAnswer({**answer, "output": items}, calls, str(answer.get("status") or "completed"),
                       usage if isinstance(usage, dict) else None)


def add_usage(total: Json | None, usage: Any) -> Json | None:
    """Token counts summed in Responses' keys (and their details where present)."""
    if not isinstance(usage, dict):
        return total
    out = dict(total or {})
    for key in _USAGE:
        if isinstance(usage.get(key), int):
            out[key] = out.get(key, 0) + usage[key]
    for group, keys in _DETAILS.items():
        details = as_object(usage.get(group))
        summed = dict(as_object(out.get(group)))
        for key in keys:
            if isinstance(details.get(key), int):
                summed[key] = summed.get(key, 0) + details[key]
        if summed:
            out[group] = summed
    return out


def full_usage(usage: Json | None) -> Json:
    """Usage with every key the Responses types require."""
    usage = usage or {}
    return {**{key: usage.get(key, 0) for key in _USAGE},
            **{group: {**dict.fromkeys(keys, 0), **as_object(usage.get(group))} for group, keys in _DETAILS.items()}}


def message_item(text: str) -> Json:
    """An assistant message item of one text."""
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def returned_item(call: ToolCall, arguments: Json) -> Json:
    """A returned function_call item, carrying the admitted (possibly rewritten) arguments."""
    return {**call.raw, "type": CALL, "call_id": call.id, "id": call.raw.get("id") or f"fc_{uuid.uuid4().hex}",
            "arguments": json.dumps(arguments, ensure_ascii=False), "status": "completed"}


def final_output(reply: Reply) -> list[Json]:
    """The answer's items the agent gets: a gateway text alone, or the answer with only the returned calls."""
    if reply.text is not None or reply.answer is None:
        return [message_item(reply.text or "")]
    returned = {call.id: returned_item(call, arguments) for call, arguments in reply.returned}
    out = []
    for item in reply.answer.raw["output"]:
        if item.get("type") != CALL:
            out.append(item)
        elif item.get("call_id") in returned:
            out.append(returned[item["call_id"]])
    return out


def new_head(model: str) -> Json:
    """A response's fields when the model was never asked."""
    return {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()), "model": model,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


def response(head: Json, reply: Reply, output: list[Json]) -> Json:
    """The whole response the agent gets (the ``gateway`` field at the top level)."""
    status = reply.answer.finish if reply.answer is not None and reply.text is None else "completed"
    return {**head, "object": "response", "status": status, "output": output, "error": None,
            "usage": full_usage(reply.usage), EXTENSION: reply.extension}
