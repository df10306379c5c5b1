"""A service the gateway launches in tests/upstreams/test_supervision.py: ``GET /pid`` answers its process id.

    python pid_service.py PORT LAUNCHES     serve on 127.0.0.1:PORT; append a line to the file LAUNCHES first

The LAUNCHES file counts launches, so a test can prove a launch happened, or never did. Standard
library only: it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"pid": os.getpid(), "served_by": "launched"}).encode()
        self.send_response(200 if self.path == "/pid" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def main() -> None:
    with open(sys.argv[2], "a", encoding="utf-8") as launches:
        launches.write(f"{os.getpid()}\n")
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Handler).serve_forever()  # exits 1 if the port is taken


if __name__ == "__main__":
    main()
