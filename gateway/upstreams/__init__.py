"""Upstreams: where tools live (MCP servers, HTTP and OpenAPI services)."""
