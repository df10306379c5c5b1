"""The agent's ``tools`` of a Messages request, as tools the pipeline decides, and a gateway tool in that shape.

A tool of the agent's own (no ``type``, or ``custom``: a name, a description and an ``input_schema``), and the
Anthropic-defined tools the client runs (``bash_*``, ``text_editor_*``, ``computer_*``, ``memory_*``: a name,
a schema the API knows) make ``tool_use`` blocks the agent runs: each is decided like any agent-run tool. The
server tools the upstream runs itself (web search and fetch, code execution, tool search) pass through
untouched: their calls never reach the agent and no rule decides them (docs/model-proxy.md says so). A tool
of any other type is refused: its calls could carry what no rule reads.
"""

from __future__ import annotations

from typing import Any

from gateway.models.client_tools import agent_tool
from gateway.models.dialects.base import Json
from gateway.upstreams.registry import ExposedTool

__all__ = ["gateway_tool", "read_tools"]

_CLIENT_RUN = ("bash_", "text_editor_", "computer_", "memory_")  # Anthropic-defined, run by the client
_SERVER_RUN = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_")  # run by the upstream


def _kind(entry: Json) -> str | None:
    """``client``, ``server``, or None for a type that is not served."""
    kind = entry.get("type")
    if kind in (None, "custom") or (isinstance(kind, str) and kind.startswith(_CLIENT_RUN)):
        return "client"
    if isinstance(kind, str) and kind.startswith(_SERVER_RUN):
        return "server"
    return None


def read_tools(tools: Any) -> dict[str, ExposedTool] | str:
    """The agent-run tools by name, or why the list cannot be served."""
    if tools is None:
        return {}
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return "'tools' must be a list of tool objects"
    found: dict[str, ExposedTool] = {}
    for entry in tools:
        kind = _kind(entry)
        if kind is None:
            return f"the tool type {entry.get('type')!r} is not served (its calls could not be decided)"
        if kind == "server":
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            return "every tool needs a name"
        found[name] = agent_tool(name, entry.get("description"), entry.get("input_schema"))
    return found


def gateway_tool(tool: ExposedTool) -> Json:
    """A gateway tool as a Messages tool."""
    return {"name": tool.name, "description": tool.spec.description, "input_schema": tool.spec.input_schema}
