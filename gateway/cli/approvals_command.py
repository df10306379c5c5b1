"""`gateway approvals list|show|approve|deny`: the approver API from a terminal.

Exit codes: 0 done; 1 the gateway answered with an error (its message is printed); 2 the gateway
could not be reached (or the command was used wrongly, as argparse does).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from gateway.approvals.model import ApprovalState
from gateway.cli.api_client import clean, options, run
from gateway.core.clock import now, parse_rfc3339

__all__ = ["register"]

STATES = tuple(str(s) for s in ApprovalState)


def register(sub: Any) -> None:
    """Add `approvals` and its subcommands to the `gateway` parser's subparsers."""
    common = options("an approver's API key")

    approvals = sub.add_parser("approvals", help="list, show, approve and deny approval requests")
    actions = approvals.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="approval requests, newest first")
    listing.add_argument("--state", choices=(*STATES, "all"), default="pending",
                         help="only requests in this state (default: pending)")
    listing.add_argument("--tool", help="only requests for this tool")
    listing.add_argument("--principal", help="only requests asked for by this principal")
    listing.add_argument("--search", help="only requests that mention this text (arguments, messages, votes)")
    listing.add_argument("--limit", type=int, default=200, help="at most this many (default: 200)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many of the newest first")
    listing.set_defaults(func=list_approvals)
    show = actions.add_parser("show", parents=[common], help="one request in full")
    show.add_argument("id")
    show.set_defaults(func=show_approval)
    approve = actions.add_parser("approve", parents=[common], help="approve a request")
    approve.add_argument("id")
    approve.add_argument("--comment", default="", help="why (the caller sees it)")
    approve.set_defaults(func=decide, approve=True)
    deny = actions.add_parser("deny", parents=[common], help="deny a request")
    deny.add_argument("id")
    deny.add_argument("--comment", required=True, help="why (the caller sees it)")
    deny.set_defaults(func=decide, approve=False)


def _run(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None,
         text: Callable[[Any], str]) -> int:
    return run(args, "approvals", method, path, body, text, "Pass an approver's key with --key or GATEWAY_API_KEY.")


def list_approvals(args: argparse.Namespace) -> int:
    """`gateway approvals list`."""
    params = {"state": None if args.state == "all" else args.state, "tool": args.tool,
              "principal": args.principal, "q": args.search, "limit": args.limit, "offset": args.offset}
    query = urlencode({k: v for k, v in params.items() if v is not None})

    def text(data: dict[str, Any]) -> str:
        table = _table(data["approvals"], args.state)
        shown, total = len(data["approvals"]), data.get("total", 0)
        if shown and total > args.offset + shown:
            table += f"\n({shown} of {total} shown; see more with --offset {args.offset + shown})"
        return table

    return _run(args, "GET", f"/v1/approvals?{query}", None, text)


def show_approval(args: argparse.Namespace) -> int:
    """`gateway approvals show ID`."""
    return _run(args, "GET", f"/v1/approvals/{_segment(args.id)}", None, _details)


def decide(args: argparse.Namespace) -> int:
    """`gateway approvals approve|deny ID`."""
    return _run(args, "POST", f"/v1/approvals/{_segment(args.id)}/decision",
                {"approve": args.approve, "comment": args.comment}, _decided)


# -- text output ----------------------------------------------------------------------------------


def _table(approvals: list[dict[str, Any]], state: str) -> str:
    if not approvals:
        return "No approval requests." if state == "all" else f"No {state} approval requests."
    header = ("ID", "STATE", "TOOL", "REQUESTED BY", "CREATED", "TIME LEFT", "APPROVALS", "THE CALL")
    rows = [header] + [(
        clean(a["id"]), a["state"], clean(a["tool"]), clean(a["principal"]["id"]), clean(a["created_at"]),
        _left(a) if a["state"] == "pending" else "-",
        f"{sum(1 for r in a['requirements'] if r['satisfied_by'])}/{len(a['requirements'])}",
        _execution(a),
    ) for a in approvals]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _whose(upstream: Any) -> str:
    """Whose tool a request is for: an approval releases only that upstream's tool of the name."""
    if upstream == "client":
        return " (the agent's own tool, through the model proxy)"
    return f" (upstream {clean(upstream)})" if isinstance(upstream, str) and upstream else ""


def _details(a: dict[str, Any]) -> str:
    p = a["principal"]
    groups = f" (groups: {', '.join(clean(g) for g in p['groups'])})" if p["groups"] else ""
    left = f" ({_left(a)} left)" if a["state"] == "pending" else ""
    lines = [
        f"Approval {clean(a['id'])}: {a['state']}",
        f"  Tool:          {clean(a['tool'])}{_whose(a.get('upstream'))}",
        f"  Requested by:  {clean(p['id'])}{groups}",
        f"  Call:          {clean(a['call_id'])} (session {clean(a['session'])})",
        f"  Created:       {clean(a['created_at'])}",
        f"  Expires:       {clean(a['expires_at'])}{left}; if nobody decides it is "
        + ("allowed" if a["on_timeout"] == "allow" else "refused"),
        f"  The call:      {_execution(a)}",
        "Requirements:",
    ]
    for r in a["requirements"]:
        approvers = ", ".join(clean(x) for x in r["approvers"]) or "any approver"
        done = f"approved by {clean(r['satisfied_by'])}" if r["satisfied_by"] else "waiting"
        lines.append(f"  [{'x' if r['satisfied_by'] else ' '}] {clean(r['rule'])}: {clean(r['message'])}")
        lines.append(f"      approvers: {approvers}; {done}")
    lines.append("Arguments:")
    original, final = a["original_args"], a["final_args"]
    for key in sorted(original.keys() | final.keys()):
        if original.get(key, _ABSENT) == final.get(key, _ABSENT):
            lines.append(f"  {clean(key)}: {_value(final[key])}")
        else:
            lines.append(f"  {clean(key)}: {_value(original.get(key, _ABSENT))} -> {_value(final.get(key, _ABSENT))}"
                         "   (rewritten by policy)")
    if not original and not final:
        lines.append("  (none)")
    edit = a.get("edit")
    if edit:  # approved with the arguments edited: the call runs with these instead
        lines.append(f"Edited by {clean(edit['by'])} at {clean(edit['at'])}; the call runs with:")
        lines.extend(f"  {clean(key)}: {_value(value)}" for key, value in sorted(edit["final_args"].items()))
    if a["votes"]:
        lines.append("Decisions:")
        for v in a["votes"]:
            comment = f": {clean(v['comment'])}" if v["comment"] else ""
            lines.append(f"  {clean(v['at'])}  {clean(v['approver'])} {'approved' if v['approve'] else 'denied'}"
                         f"{comment}")
    return "\n".join(lines)


def _execution(a: dict[str, Any]) -> str:
    """What became of the call itself ("approved, waiting for the agent to call again (until ...)", "ran at ...")."""
    execution = a.get("execution") or {}
    return clean(str(execution.get("label") or "-"))


def _decided(a: dict[str, Any]) -> str:
    tool, who = clean(a["tool"]), clean(a["principal"]["id"])
    if a["state"] == "pending":
        waiting = sum(1 for r in a["requirements"] if not r["satisfied_by"])
        return f"Recorded your approval of {clean(a['id'])} ({tool} for {who}); still waiting on {waiting} more."
    return f"{'Denied' if a['state'] == 'denied' else 'Approved'} {clean(a['id'])} ({tool} for {who})."


_ABSENT = object()


def _value(value: Any) -> str:
    if value is _ABSENT:
        return "(not set)"
    return clean(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _left(a: dict[str, Any]) -> str:
    try:
        expires = parse_rfc3339(a["expires_at"])
    except (ValueError, AttributeError):
        return "?"
    s = int(expires - now())
    if s <= 0:
        return "none"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _segment(approval_id: str) -> str:
    """The id as one URL path segment."""
    return quote(approval_id, safe="")
