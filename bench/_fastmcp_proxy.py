"""A FastMCP proxy reusing one connected upstream session: a peer row of bench/gateway.py.

Run by the Python of bench/.venv-peers/fastmcp (see bench/_peers.py), never the project's.

    python bench/_fastmcp_proxy.py UPSTREAM_URL PORT MODE
"""

from __future__ import annotations

import sys


def _serve_fastmcp_proxy(upstream_url: str, port: int, mode: str) -> None:
    import asyncio

    from fastmcp import Client
    from fastmcp.server import create_proxy
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    async def main() -> None:
        # A connected client: the proxy reuses its one session for every call (FastMCP's fastest setup).
        async with Client(upstream_url, mode=mode) as client:
            proxy = create_proxy(client, name="fastmcp-proxy")

            @proxy.custom_route("/healthz", methods=["GET"])
            async def healthz(request: Request) -> JSONResponse:
                return JSONResponse({"status": "ok"})

            await proxy.run_http_async(host="127.0.0.1", port=port, path="/mcp", log_level="warning",
                                       show_banner=False)

    asyncio.run(main())


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python bench/_fastmcp_proxy.py UPSTREAM_URL PORT MODE")
    _serve_fastmcp_proxy(sys.argv[1], int(sys.argv[2]), sys.argv[3])
