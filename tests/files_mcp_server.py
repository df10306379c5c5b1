"""An upstream MCP server of the SDK (``MCPServer``, stdio) whose resource templates read the way servers do.

``file:///{+path}`` reads a small in-memory tree after resolving the path as a file system would
(``public/../finance/q3.txt`` is ``finance/q3.txt``), with the SDK's default ``ResourceSecurity``;
``records://{id}`` and ``notes://users/{name}`` look their variable up as the SDK decoded it. The
listed resources are ``file:///public/readme.txt`` and ``file:///finance/summary.txt``. Every read it
serves is appended to the file named by ``FILES_READ_LOG``, so a test sees what reached the server.
"""

from __future__ import annotations

import os
import posixpath

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

FILES = {"public/readme.txt": "the public readme", "finance/q3.txt": "SECRET Q3 numbers",
         "finance/summary.txt": "SECRET summary"}
RECORDS = {"7": "record seven", "13": "SECRET record thirteen"}
NOTES = {"bob": "bob's notes", "alice": "SECRET notes of alice"}

server = MCPServer("files")


def _served(what: str, text: str | None) -> str:
    if text is None:
        raise ResourceNotFoundError(f"Unknown resource: no such {what}")
    with open(os.environ["FILES_READ_LOG"], "a", encoding="utf-8") as log:
        log.write(what + "\n")
    return text


@server.resource("file:///public/readme.txt", name="readme", mime_type="text/plain")
def readme() -> str:
    """A listed file anyone may read."""
    return _served("public/readme.txt", FILES["public/readme.txt"])


@server.resource("file:///finance/summary.txt", name="summary", mime_type="text/plain")
def summary() -> str:
    """A listed file the finance rule guards."""
    return _served("finance/summary.txt", FILES["finance/summary.txt"])


@server.resource("file:///{+path}", name="files", mime_type="text/plain")
def read_file(path: str) -> str:
    """A file, its path resolved as a file system resolves it."""
    resolved = posixpath.normpath(path).lstrip("/")
    return _served(resolved, FILES.get(resolved))


@server.resource("records://{id}", name="records", mime_type="text/plain")
def read_record(id: str) -> str:
    """A record by id."""
    return _served(f"record {id}", RECORDS.get(id))


@server.resource("notes://users/{name}", name="notes", mime_type="text/plain")
def read_notes(name: str) -> str:
    """A user's notes."""
    return _served(f"notes {name}", NOTES.get(name))


if __name__ == "__main__":
    server.run()
