"""A small MCP server over stdio: a notebook the quick-start gateway fronts.

Run by the gateway itself (see gateway.yaml); state lives in memory for the life of the process.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("notes", version="0.1.0")
_notes: dict[int, str] = {1: "Buy milk", 2: "Call Ana about the Q3 report"}


@server.tool(annotations=ToolAnnotations(title="List notes", read_only_hint=True, destructive_hint=False))
def list_notes() -> dict[str, str]:
    """Every note, by id."""
    return {str(k): v for k, v in sorted(_notes.items())}


@server.tool(annotations=ToolAnnotations(title="Search notes", read_only_hint=True, destructive_hint=False))
def search(query: str, limit: int = 10) -> list[str]:
    """Notes containing the query (case-insensitive), at most `limit`."""
    hits = [v for v in _notes.values() if query.lower() in v.lower()]
    return hits[:limit]


@server.tool(annotations=ToolAnnotations(title="Add a note", read_only_hint=False, destructive_hint=False))
def add_note(text: str) -> dict[str, int]:
    """Add a note; returns its id."""
    new_id = max(_notes, default=0) + 1
    _notes[new_id] = text
    return {"id": new_id}


@server.tool(annotations=ToolAnnotations(title="Delete a note", read_only_hint=False, destructive_hint=True))
def delete_note(note_id: int) -> dict[str, bool]:
    """Delete a note by id."""
    return {"deleted": _notes.pop(note_id, None) is not None}


@server.tool(annotations=ToolAnnotations(title="Fetch a URL", read_only_hint=True, open_world_hint=True))
def fetch(url: str) -> str:
    """Pretend to fetch a URL (the example never leaves the machine)."""
    return f"<html>content of {url}</html>"


if __name__ == "__main__":
    server.run()
