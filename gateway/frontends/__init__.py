"""Frontends: how agents reach the gateway (MCP over streamable HTTP, and REST)."""
