"""The MCP frontend: one streamable-HTTP endpoint at /mcp, both protocol eras (``frontend.McpFrontend``).

Only ``_sdk.py`` touches the SDK's private modules and names; tests/frontends/mcp/test_sdk.py pins each.
"""

from __future__ import annotations

from gateway.frontends.mcp.frontend import CALL_ID_META, McpFrontend

__all__ = ["CALL_ID_META", "McpFrontend"]
