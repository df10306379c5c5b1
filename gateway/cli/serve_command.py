"""`gateway serve CONFIG`: run the gateway with uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.errors import ConfigError, PolicyLoadError

__all__ = ["serve"]


def serve(args: argparse.Namespace) -> int:
    """Load the config, build the app, serve until interrupted."""
    import uvicorn

    from gateway.app import build_app
    from gateway.config.load import load_config

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        app = build_app(config)
    except (ConfigError, PolicyLoadError) as exc:
        for d in exc.diagnostics:
            print(d.format(), file=sys.stderr)
        return 1
    host = args.host or config.spec.listen.host
    port = args.port if args.port is not None else config.spec.listen.port
    print(f"gateway: listening on http://{host}:{port} (MCP at /mcp, REST at /v1)", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level=args.log_level, lifespan="on")
    return 0
