"""`gateway serve CONFIG`: run the gateway with uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from gateway.cli.start_errors import START_ERRORS, report_start_error
from gateway.observe.logs import configure_logs, uvicorn_log_config

__all__ = ["serve"]


def serve(args: argparse.Namespace) -> int:
    """Load the config, build the app, serve until interrupted."""
    import uvicorn

    from gateway.app import build_app, server_options
    from gateway.config.load import load_config

    level = getattr(logging, args.log_level.upper())
    configure_logs(level)  # until the config says more
    try:
        config = load_config(args.config)
        json_logs = (getattr(args, "log_format", None) or config.spec.logging.format) == "json"
        configure_logs(level, json_lines=json_logs, libraries=config.spec.logging.libraries == "verbose")
        # command-line overrides first, so links the gateway hands out use the real address
        if args.host:
            config.spec.listen.host = args.host
        if args.port is not None:
            config.spec.listen.port = args.port
        store = config.spec.store.sqlite if config.spec.store.postgres is None else None
        data = [config.path(p) for p in (store, config.spec.audit.file) if p]
        if problem := unwritable(data):
            print(f"gateway: {problem}", file=sys.stderr)
            return 1
        if args.workers < 1:
            print("gateway: --workers must be 1 or more", file=sys.stderr)
            return 2
        if args.workers > 1 and config.spec.approvals.sso is not None:
            # approvers' sessions live in the memory of the process that signed them in (docs/approvals-sso.md)
            print("gateway: approvals.sso needs --workers 1: an approver's sign-in session is held by one process",
                  file=sys.stderr)
            return 2
        if args.workers > 1:
            from gateway.cli.workers import serve_workers

            return serve_workers(args, config, json_logs=json_logs)
        app = build_app(config)
    except START_ERRORS as exc:
        report_start_error(exc)
        return 1
    host, port = config.spec.listen.host, config.spec.listen.port
    listening = f"listening on http://{host}:{port} (MCP at /mcp, REST at /v1)"
    if json_logs:  # every line on stderr is JSON
        logging.getLogger("gateway").warning(listening)
    else:
        print(f"gateway: {listening}", file=sys.stderr)
    log_config = uvicorn_log_config(json_lines=json_logs, access_on_stdout=not config.spec.audit.stdout)
    uvicorn.run(app, host=host, port=port, log_level=args.log_level, lifespan="on", log_config=log_config,
                **server_options(config))
    return 0


def unwritable(paths: list[Path]) -> str | None:
    """Why one of these data files (the store, the audit log) cannot be written, or None when all can.

    Their folders are created if missing. SQLite also needs to write next to its file (journal), so
    the folder itself must be writable, not only the file.
    """
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot create the folder for {path}: {exc.strerror or exc}"
        if not path.parent.is_dir() or not os.access(path.parent, os.W_OK | os.X_OK):
            return f"cannot write to {path.parent} (needed for {path.name}): check its permissions"
        if path.exists() and (path.is_dir() or not os.access(path, os.W_OK)):
            return f"cannot write to {path}: check its permissions"
    return None
