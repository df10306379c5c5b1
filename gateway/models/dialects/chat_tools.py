"""Chat completions' function tools: the agent's ``tools`` read, and a gateway tool written in that shape."""

from __future__ import annotations

from typing import Any

from gateway.models.client_tools import agent_tool
from gateway.upstreams.registry import ExposedTool

__all__ = ["client_tools", "function_tool"]


def client_tools(tools: Any) -> dict[str, ExposedTool] | str:
    """The request's function tools by name, or why the list cannot be read."""
    if tools is None:
        return {}
    if not isinstance(tools, list):
        return "'tools' must be a list"
    found: dict[str, ExposedTool] = {}
    for entry in tools:
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or entry.get("type") != "function" or not isinstance(function, dict):
            # Other kinds (custom tools, a provider's built-ins) would give calls no rule could read: refused.
            return "only function tools ('type': 'function') are served"
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return "every function tool needs a name"
        found[name] = agent_tool(name, function.get("description"), function.get("parameters"))
    return found


def function_tool(tool: ExposedTool) -> dict[str, Any]:
    """A gateway tool as a chat-completions function tool."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.spec.description,
                                             "parameters": tool.spec.input_schema}}
