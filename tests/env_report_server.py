"""A launched upstream that reports the environment it was started with (for tests/upstreams/test_launch_env.py).

    python env_report_server.py mcp          an MCP server over stdio with tools ``environment`` and
                                             ``blob`` (a result of ``size`` bytes, for test_upstream_responses.py)
    python env_report_server.py http PORT    an HTTP service on 127.0.0.1:PORT answering ``GET /environment``

Both answer with the process's environment as a JSON object.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(dict(os.environ)).encode()
        self.send_response(200 if self.path == "/environment" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args  # quiet: the test reads the answer, not the log


def main() -> None:
    if sys.argv[1] == "http":
        ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), _Handler).serve_forever()
        return
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("env-report", version="0.1.0")

    @server.tool()
    def environment() -> str:
        """This process's environment variables, as a JSON object."""
        return json.dumps(dict(os.environ))

    @server.tool()
    def blob(size: int) -> str:
        """A text of ``size`` x's."""
        return "x" * size

    server.run()


if __name__ == "__main__":
    main()
