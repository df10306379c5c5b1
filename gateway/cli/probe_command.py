"""`gateway check --config gateway.yaml --probe`: start every upstream once, list its tools, or say why not.

It reuses the gateway's own start code (``build_registry`` and the supervisor's ``attempt``), so what
the probe reaches is what `gateway serve` would reach; launched services are launched and stopped
again. Exit 1 when any upstream cannot be reached (or the check itself failed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["register"]

Command = Callable[[argparse.Namespace], int]


def register(check: argparse.ArgumentParser) -> None:
    """Add ``--probe`` to the `check` parser, around the command it already runs."""
    check.add_argument("--probe", action="store_true",
                       help="with --config: connect to every upstream and list its tools (exit 1 if any fails)")
    check.set_defaults(func=_with_probe(check.get_default("func")))


def _with_probe(command: Command) -> Command:
    def run(args: argparse.Namespace) -> int:
        if not getattr(args, "probe", False):
            return command(args)
        if not args.config:
            print("gateway check: --probe needs --config", file=sys.stderr)
            return 2
        # The probe starts the upstreams itself and says which fail: the check does not start them
        # a second time for its catalog (that needs --tools with --probe).
        args.no_upstreams = True
        if args.format == "json":  # one JSON document: the check's, with the probe's findings added
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = command(args)
            report: dict[str, Any] = json.loads(out.getvalue())
            if code == 0:
                report["upstreams"], failed = _probe(args.config)
                report["ok"] = not failed
                code = 1 if failed else 0
            print(json.dumps(report, indent=2))
            return code
        code = command(args)
        if code != 0:
            return code
        found, failed = _probe(args.config)
        for upstream in found:
            if upstream["error"] is None:
                tools = upstream["tools"]
                print(f"probe: {upstream['name']}: up, {len(tools)} tools" + (f": {', '.join(tools)}" if tools else ""))
            else:
                print(f"probe: {upstream['name']}: DOWN: {upstream['error']}", file=sys.stderr)
        return 1 if failed else 0

    return run


def _probe(config_file: str) -> tuple[list[dict[str, Any]], bool]:
    """Each upstream's exposed tool names or its error; and whether any failed (names are checked too)."""
    from gateway.app import build_registry
    from gateway.config.load import load_config
    from gateway.core.errors import GatewayError
    from gateway.upstreams.supervise import probe

    try:
        config = load_config(config_file)
        registry = build_registry(config)
    except GatewayError as exc:  # a secret that cannot be read, an OpenAPI document that does not load
        print(f"probe: cannot build the upstreams: {exc}", file=sys.stderr)
        return [], True
    results = asyncio.run(probe(registry.upstreams))
    problems = registry.rebuild()
    for problem in problems:
        print(f"probe: {problem}", file=sys.stderr)
    by_name = {spec.name: spec for spec in config.spec.upstreams}
    found = [{"name": r.name, "tools": [by_name[r.name].exposed_name(t) for t in r.tools], "error": r.error}
             for r in results]
    return found, bool(problems) or any(r.error is not None for r in results)
