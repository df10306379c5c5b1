"""The `gateway` command: check, test, explain, replay, schema, serve, approvals, sessions, tools, status, audit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.cli import (
    approvals_command,
    audit_command,
    coverage_command,
    policy_commands,
    probe_command,
    replay_command,
    serve_command,
    sessions_command,
    status_command,
    tools_command,
)
from gateway.policy.cel import ENGINE_NAMES

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="gateway", description="A policy gateway for AI agent tool calls.")
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def engine(p: argparse.ArgumentParser) -> None:
        p.add_argument("--engine", choices=ENGINE_NAMES, default="auto",
                       help="CEL engine (default: auto, the C++ engine when installed)")

    def fmt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--format", choices=("text", "json"), default="text")

    check = sub.add_parser("check", help="load and compile policy files (and a gateway config)")
    check.add_argument("paths", nargs="*", help="policy files or directories")
    check.add_argument("--config", help="also check this gateway config file")
    check.add_argument("--tools", metavar="TOOLS.json",
                       help="also check the policies against this tool catalog (`gateway tools --format json`)")
    check.add_argument("--no-upstreams", action="store_true",
                       help="with --config: do not start the upstreams to check against their live tools")
    check.add_argument("--lock", metavar="TOOLS.lock",
                       help="with --config: compare the upstreams' tools with this tools lock; drift is an error")
    check.add_argument("--strict", action="store_true", help="fail on warnings too")
    check.add_argument("--write-manifest", nargs="?", const="", metavar="PATH",
                       help="when the check passes, write the SHA-256 manifest of the policy files to PATH "
                            "(default: the config's reload.manifest, else policies.manifest.json)")
    engine(check)
    fmt(check)
    check.set_defaults(func=policy_commands.check)
    probe_command.register(check)

    test = sub.add_parser("test", help="run policy test suites (*_test.yaml)")
    test.add_argument("paths", nargs="+", help="suite files or directories")
    test.add_argument("--run", metavar="REGEX", help='only cases whose "suite/name" matches')
    test.add_argument("-v", "--verbose", action="store_true", help="print every case, not only failures")
    engine(test)
    fmt(test)
    test.set_defaults(func=policy_commands.test)
    coverage_command.register(test)

    explain = sub.add_parser("explain", help="decide one call and show every rule considered")
    explain.add_argument("--policies", nargs="+", required=True, metavar="PATH")
    explain.add_argument("--call", required=True, metavar="CALL.json",
                         help="JSON (or YAML) with {tool, args, principal, session, call, env, stage, result}")
    explain.add_argument("--config", help="take env from this gateway config, as the gateway does")
    engine(explain)
    fmt(explain)
    explain.set_defaults(func=policy_commands.explain)

    replay_command.register(sub, engine, fmt)

    serve = sub.add_parser("serve", help="run the gateway from a config file")
    serve.add_argument("config", help="gateway.yaml")
    serve.add_argument("--host", help="override listen.host")
    serve.add_argument("--port", type=int, help="override listen.port")
    serve.add_argument("--workers", type=int, default=1,
                       help="processes sharing the socket and the store (docs/store.md)")
    serve.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    serve.add_argument("--log-format", choices=("text", "json"), help="override logging.format (default: text)")
    serve.set_defaults(func=serve_command.serve)

    schema = sub.add_parser("schema", help="print a JSON Schema (for editors)")
    schema.add_argument("kind", choices=policy_commands.SCHEMAS)
    schema.set_defaults(func=policy_commands.schema)

    approvals_command.register(sub)
    sessions_command.register(sub)
    tools_command.register(sub)
    status_command.register(sub)
    audit_command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gateway` console script."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    sys.stdout.flush()
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
