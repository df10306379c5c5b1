"""The agent's own tools (its request's ``tools`` list) as tools the pipeline can decide.

Each is an ``ExposedTool`` of the upstream ``client``: "running" it hands the call back to the agent,
so the pipeline's run step records the admitted (possibly rewritten) arguments as the result. An
approved call therefore has one stored outcome, the arguments it was approved with, like any other
approved call: a retry bound to the same approval gets the same arguments (exactly once, as for MCP).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.core.globs import glob_match
from gateway.pipeline.request import CallOutcome
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.upstreams.base import ToolProgress, ToolResult, UpstreamTool
from gateway.upstreams.registry import ExposedTool, expose

__all__ = ["CLIENT", "ClientUpstream", "admitted_args", "client_tools", "function_tool", "undeclared_tools"]

CLIENT = CLIENT_UPSTREAM  # tool.upstream for a tool the agent runs itself
_ADMITTED = "gateway/admitted_arguments"


class ClientUpstream:
    """The agent as an upstream: a call it is given is admitted, never run here."""

    name = CLIENT

    async def start(self) -> None:
        """Nothing to start."""

    async def close(self) -> None:
        """Nothing to close."""

    def tools(self) -> list[UpstreamTool]:
        """The agent's tools come with each request, not from here."""
        return []

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float,
                   progress: ToolProgress | None = None) -> ToolResult:
        """Admit the call: its result is the arguments the agent will get."""
        del tool, timeout, progress
        return ToolResult([{"type": "text", "text": json.dumps(arguments, ensure_ascii=False)}],
                          {_ADMITTED: arguments})

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        """The tool list never changes."""
        del callback


_UPSTREAM = ClientUpstream()


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
        name, parameters = function.get("name"), function.get("parameters")
        if not isinstance(name, str) or not name:
            return "every function tool needs a name"
        description = function.get("description")
        spec = UpstreamTool(name, description if isinstance(description, str) else "",
                            parameters if isinstance(parameters, dict) else {"type": "object"})
        found[name] = expose(name, _UPSTREAM, spec)
    return found


def undeclared_tools(tools: Iterable[str], declared: Sequence[str] | None) -> list[str]:
    """The agent tools no ``declared`` glob (``models[].client_tools``) matches; none when nothing is declared."""
    if declared is None:
        return []
    return [name for name in tools if not any(glob_match(name, g) for g in declared)]


def function_tool(tool: ExposedTool) -> dict[str, Any]:
    """A gateway tool as a chat-completions function tool."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.spec.description,
                                             "parameters": tool.spec.input_schema}}


def admitted_args(outcome: CallOutcome) -> dict[str, Any] | None:
    """The arguments an admitted agent-run call goes back with, or None when the call was not admitted."""
    if outcome.is_error or not isinstance(outcome.structured, dict):
        return None
    args = outcome.structured.get(_ADMITTED)
    return args if isinstance(args, dict) else None
