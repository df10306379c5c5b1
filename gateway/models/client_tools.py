"""The agent's own tools (its request's ``tools`` list) as tools the pipeline can decide.

Each is an ``ExposedTool`` of the upstream ``client`` (what ``tool.upstream`` reads in CEL and the audit
names). The gateway never runs one: the model proxy sends its calls through ``Gateway.decide``, the
decide-only path, and an admitted call goes back to the agent with the admitted (possibly rewritten)
arguments. An approved call is handed out once, like any approved call runs once (exactly once, as for MCP).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.core.errors import UpstreamError
from gateway.core.globs import glob_match
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.upstreams.base import ToolProgress, ToolResult, UpstreamTool
from gateway.upstreams.registry import ExposedTool, expose

__all__ = ["CLIENT", "AgentRunner", "agent_tool", "client_tools", "function_tool", "undeclared_tools"]

CLIENT = CLIENT_UPSTREAM  # tool.upstream for a tool the agent runs itself


class AgentRunner:
    """The agent as the upstream of its own tools: it runs them, the gateway only decides their calls."""

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
        """Never called: an agent-run tool is decided (``Gateway.decide``), not run. Fails closed if it is."""
        del arguments, timeout, progress
        raise UpstreamError(f"{tool} is run by the agent, not by the gateway")

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        """The tool list never changes."""
        del callback


_UPSTREAM = AgentRunner()


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


def agent_tool(name: str, description: Any, parameters: Any) -> ExposedTool:
    """One of the agent's tools (any API's function-tool shape, read by its dialect) as a tool the pipeline decides."""
    spec = UpstreamTool(name, description if isinstance(description, str) else "",
                        parameters if isinstance(parameters, dict) else {"type": "object"})
    return expose(name, _UPSTREAM, spec)


def undeclared_tools(tools: Iterable[str], declared: Sequence[str] | None) -> list[str]:
    """The agent tools no ``declared`` glob (``models[].client_tools``) matches; none when nothing is declared."""
    if declared is None:
        return []
    return [name for name in tools if not any(glob_match(name, g) for g in declared)]


def function_tool(tool: ExposedTool) -> dict[str, Any]:
    """A gateway tool as a chat-completions function tool."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.spec.description,
                                             "parameters": tool.spec.input_schema}}

