"""`gateway sessions list|show|reset|end`: the admin API for agent runs from a terminal (docs/runs.md).

Needs a key with ``admin: true``. Exit codes as `gateway approvals`: 0 done; 1 the gateway answered
with an error (its message is printed); 2 the gateway could not be reached (or bad usage).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from gateway.cli.api_client import clean, options, run

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add `sessions` and its subcommands to the `gateway` parser's subparsers."""
    common = options("an admin's API key")

    sessions = sub.add_parser("sessions", help="list, show, reset and end agent runs (admin keys)")
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="agent runs, newest first")
    listing.add_argument("--principal", help="only this principal's runs")
    listing.add_argument("--implicit", choices=("true", "false"), help="only implicit (or only named) runs")
    listing.add_argument("--terminated", choices=("true", "false"), help="only terminated (or only live) runs")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default: 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many of the newest first")
    listing.set_defaults(func=list_sessions)
    for name, text in (("show", "one run's counters, labels, tallies and latest calls"),
                       ("reset", "counters to zero, no labels, tallies or history, and not terminated"),
                       ("end", "terminate the run (an implicit run's client starts a new one)")):
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("principal", help="whose run")
        action.add_argument("id", help="the run id")
        if name == "end":
            action.add_argument("--message", help="what the agent reads on its next call")
        action.set_defaults(func={"show": show_session, "reset": reset_session, "end": end_session}[name])


def _run(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None,
         text: Callable[[Any], str]) -> int:
    return run(args, "sessions", method, path, body, text, "Pass an admin's key with --key or GATEWAY_API_KEY.")


def _path(args: argparse.Namespace, suffix: str = "") -> str:
    return f"/v1/admin/sessions/{quote(args.principal, safe='')}/{quote(args.id, safe='')}{suffix}"


def list_sessions(args: argparse.Namespace) -> int:
    """`gateway sessions list`."""
    params = {"principal": args.principal, "implicit": args.implicit, "terminated": args.terminated,
              "limit": args.limit, "offset": args.offset}
    query = urlencode({k: v for k, v in params.items() if v is not None})

    def text(data: dict[str, Any]) -> str:
        table = _table(data["sessions"])
        shown, total = len(data["sessions"]), data.get("total", 0)
        if shown and total > args.offset + shown:
            table += f"\n({shown} of {total} shown; see more with --offset {args.offset + shown})"
        return table

    return _run(args, "GET", f"/v1/admin/sessions?{query}", None, text)


def show_session(args: argparse.Namespace) -> int:
    """`gateway sessions show PRINCIPAL ID`."""
    return _run(args, "GET", _path(args), None, _details)


def reset_session(args: argparse.Namespace) -> int:
    """`gateway sessions reset PRINCIPAL ID`."""
    return _run(args, "POST", _path(args, "/reset"), {},
                lambda s: f"Reset run {clean(s['id'])} of {clean(s['principal'])}: 0 calls, no labels, tallies or "
                          "history, not terminated.")


def end_session(args: argparse.Namespace) -> int:
    """`gateway sessions end PRINCIPAL ID`."""
    body = {"message": args.message} if args.message else {}
    return _run(args, "POST", _path(args, "/end"), body,
                lambda s: f"Ended run {clean(s['id'])} of {clean(s['principal'])}: "
                          f"{clean(s['terminate_message'])}")


def _table(sessions: list[dict[str, Any]]) -> str:
    if not sessions:
        return "No sessions."
    header = ("PRINCIPAL", "RUN", "KIND", "STARTED", "CALLS", "REJECTED", "STATE")
    rows = [header] + [(
        clean(s["principal"]), clean(s["id"]), f"implicit ({clean(s['client'])})" if s["implicit"] else "named",
        clean(s["started_at"]), str(s["calls"]), str(s["rejected"]), "terminated" if s["terminated"] else "live",
    ) for s in sessions]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _details(s: dict[str, Any]) -> str:
    kind = f"implicit, made for client {clean(s['client'])}" if s["implicit"] else "named by the client"
    lines = [
        f"Run {clean(s['id'])} of {clean(s['principal'])} ({kind})",
        f"  Started:   {clean(s['started_at'])}",
        f"  Calls:     {s['calls']}  (rejected: {s['rejected']})",
        f"  State:     {'terminated: ' + clean(s['terminate_message']) if s['terminated'] else 'live'}",
    ]
    labels = s.get("labels") or []
    lines.append(f"  Labels:    {', '.join(clean(label) for label in labels) if labels else 'none'}")
    if s.get("tallies"):
        lines.append("  Tallies:   " + ", ".join(f"{clean(k)} = {v}" for k, v in sorted(s["tallies"].items())))
    for tally, values in sorted((s.get("seen") or {}).items()):
        lines.append(f"  Seen ({clean(tally)}): {', '.join(clean(v) for v in values) or 'none'}")
    if s["calls_by_tool"]:
        lines.append("  By tool:")
        lines += [f"    {clean(tool)}: {n}" for tool, n in sorted(s["calls_by_tool"].items())]
    if s.get("history"):
        lines.append("  Latest calls (oldest first):")
        lines += [_step(entry) for entry in s["history"]]
    return "\n".join(lines)


def _step(entry: dict[str, Any]) -> str:
    """One call of the run's history: when, the tool, its verdict, the rule that decided it, the labels it added."""
    line = f"    {clean(entry.get('time', ''))}  {clean(entry.get('tool', ''))} — {clean(entry.get('verdict', ''))}"
    if entry.get("rule"):
        line += f" (rule {clean(entry['rule'])})"
    if entry.get("labels"):
        line += "  added: " + ", ".join(clean(label) for label in entry["labels"])
    return line
