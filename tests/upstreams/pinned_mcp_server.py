"""A stdio MCP server whose definitions come from a JSON file read when it starts: restart it after
changing the file and it lists the same tools, resource and prompt with other descriptions (a rug pull).

The file (``PINNED_DEFINITIONS``) holds ``{"tools": {name: description}, "resource": text, "prompt": text}``;
each named tool takes ``text`` and returns it; ``pid`` says which process answered.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

definitions: dict[str, Any] = json.loads(Path(os.environ["PINNED_DEFINITIONS"]).read_text(encoding="utf-8"))
server = MCPServer("pinned", version="1.0.0")


def _echo(text: str) -> str:
    return text


for name, description in definitions["tools"].items():
    server.tool(name=name, description=description)(_echo)


@server.tool(description="The id of the process that answered.")
def pid() -> int:
    return os.getpid()


@server.resource("notes://today", description=definitions.get("resource", "Today's notes."), mime_type="text/plain")
def today() -> str:
    return "nothing planned"


@server.prompt(description=definitions.get("prompt", "Summarise a text."))
def summarise(text: str) -> str:
    return f"Summarise: {text}"


if __name__ == "__main__":
    server.run("stdio")
