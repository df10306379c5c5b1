"""MCP upstreams: the gateway as a client of MCP servers, over streamable HTTP or a stdio subprocess.

- ``upstream.py``: ``McpUpstream``, one server's connection, tools and calls (through the SDK's ``Client``).
- ``eras.py``: which MCP era is spoken, and how tool-list changes arrive in each.
- ``lean.py``: the lean ``tools/call`` over the pooled HTTP client, in the SDK client's session.
- ``tasks.py``: tools that run only as upstream tasks; the 2026-07-28 tasks extension.
- ``resources.py``: an upstream's resources, templates and prompts.
- ``_sdk.py``: the one module that touches the SDK's private names (``tests/upstreams/mcp/test_sdk.py`` pins them).
"""

from gateway.upstreams.mcp.eras import PROTOCOLS
from gateway.upstreams.mcp.resources import McpItems
from gateway.upstreams.mcp.upstream import McpUpstream

__all__ = ["PROTOCOLS", "McpItems", "McpUpstream"]
