"""The agent's own tools (its request's ``tools``, read by the API's dialect) as tools the pipeline can decide.

Each is an ``ExposedTool`` of the upstream ``client`` (what ``tool.upstream`` reads in CEL and the audit
names). The gateway never runs one: the model proxy sends its calls through ``Gateway.decide``, the
decide-only path, and an admitted call goes back to the agent with the admitted (possibly rewritten)
arguments. An approved call is handed out once, like any approved call runs once (exactly once, as for MCP).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.core.errors import UpstreamError
from gateway.core.globs import glob_match
from gateway.core.limits import MODEL_AGENT_TOOLS_KEPT
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.upstreams.base import ToolProgress, ToolResult, UpstreamTool
from gateway.upstreams.registry import ExposedTool, expose

__all__ = ["CLIENT", "AgentRunner", "agent_tool", "undeclared_tools"]

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


def agent_tool(name: str, description: Any, parameters: Any) -> ExposedTool:
    """One of the agent's tools (any API's function-tool shape, read by its dialect) as a tool the pipeline decides.

    The same declaration comes with every request of a conversation: its compiled form is kept (bounded), keyed
    by its canonical JSON, so a schema is checked and its validator built once, not per request."""
    text = description if isinstance(description, str) else ""
    schema = parameters if isinstance(parameters, dict) else {"type": "object"}
    return _compiled(name, text, json.dumps(schema, sort_keys=True, ensure_ascii=False))


@functools.lru_cache(maxsize=MODEL_AGENT_TOOLS_KEPT)
def _compiled(name: str, description: str, schema: str) -> ExposedTool:
    return expose(name, _UPSTREAM, UpstreamTool(name, description, json.loads(schema)))


def undeclared_tools(tools: Iterable[str], declared: Sequence[str] | None) -> list[str]:
    """The agent tools no ``declared`` glob (``models[].client_tools``) matches; none when nothing is declared."""
    if declared is None:
        return []
    return [name for name in tools if not any(glob_match(name, g) for g in declared)]
