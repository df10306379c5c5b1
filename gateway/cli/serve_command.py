"""`gateway serve CONFIG`: run the gateway with uvicorn."""

from __future__ import annotations

import argparse
import copy
import logging
import sys
from typing import Any

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
        # command-line overrides first, so links the gateway hands out use the real address
        if args.host:
            config.spec.listen.host = args.host
        if args.port is not None:
            config.spec.listen.port = args.port
        app = build_app(config)
    except (ConfigError, PolicyLoadError) as exc:
        for d in exc.diagnostics:
            print(d.format(), file=sys.stderr)
        return 1
    host, port = config.spec.listen.host, config.spec.listen.port
    print(f"gateway: listening on http://{host}:{port} (MCP at /mcp, REST at /v1)", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level=args.log_level, lifespan="on",
                log_config=_logs_off_stdout() if config.spec.audit.stdout else uvicorn.config.LOGGING_CONFIG)
    return 0


def _logs_off_stdout() -> dict[str, Any]:
    """uvicorn's logging with its access log on stderr: stdout carries the decision log, one JSON line each."""
    import uvicorn.config

    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config
