"""`gateway status`: a running gateway's readiness (``GET /readyz``): each upstream's state, the store's,
each identity provider's keys, the policy revision, and the tools that drifted from the tools lock.

Exit codes: 0 ready (every upstream is up, the store answers); 1 not ready; 2 the gateway could not be
reached or did not answer as a gateway does.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx2

from gateway.cli.api_client import TIMEOUT_SECONDS, clean, options

__all__ = ["register", "status"]





def register(sub: Any) -> None:
    """Add `status` to the `gateway` parser's subparsers."""
    parser = sub.add_parser("status", parents=[options(None)],
                            help="a running gateway's readiness: each upstream's state and the store's")
    parser.set_defaults(func=status)


def status(args: argparse.Namespace) -> int:
    """Print ``/readyz``; exit 0 when ready, 1 when not, 2 when the gateway cannot be read."""
    url = args.url.rstrip("/") + "/readyz"
    try:
        response = httpx2.get(url, timeout=TIMEOUT_SECONDS, follow_redirects=False)
        body = response.json()
        if response.status_code not in (200, 503) or not isinstance(body, dict) \
                or not isinstance(body.get("upstreams"), list):
            raise ValueError(f"HTTP {response.status_code}, not a readiness answer")
    except (httpx2.HTTPError, ValueError) as exc:
        print(f"gateway status: cannot read {url}: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(body, indent=2))
    else:
        print(_render(body))
    return 0 if response.status_code == 200 else 1


def _render(body: dict[str, Any]) -> str:
    ready = body.get("status") == "ready"
    lines = [f"{'ready' if ready else 'NOT READY'}: policy revision {clean(body.get('revision'))}"]
    upstreams = [u for u in body["upstreams"] if isinstance(u, dict)]
    width = max([len(clean(u.get("name"))) for u in upstreams] or [0])
    for u in upstreams:
        line = f"  {clean(u.get('state')):<8} {clean(u.get('name')):<{width}}  since {clean(u.get('since'))}" \
               f"  {clean(u.get('tools'))} tools"
        if u.get("last_error"):
            line += f"  last error: {clean(u.get('last_error'))}"
        lines.append(line)
    if not upstreams:
        lines.append("  no upstreams")
    store = body.get("store")
    if isinstance(store, dict):  # gateways before issue 18 did not say
        line = f"  {clean(store.get('state')):<8} store"
        if store.get("last_error"):
            line += f"  last error: {clean(store.get('last_error'))}"
        lines.append(line)
    lines.extend(_issuers(body.get("issuers")))
    lines.extend(_tools_lock(body.get("tools_lock")))
    return "\n".join(lines)


def _issuers(issuers: Any) -> list[str]:
    """A line per identity provider (`auth.jwt`): whether its keys check tokens now, and why not."""
    lines = []
    for issuer in issuers if isinstance(issuers, list) else []:
        if isinstance(issuer, dict):
            line = (f"  {clean(issuer.get('state')):<8} issuer {clean(issuer.get('issuer'))}"
                    f"  {clean(issuer.get('keys'))} keys")
            if issuer.get("last_error"):
                line += f"  last error: {clean(issuer.get('last_error'))}"
            lines.append(line)
    return lines


def _tools_lock(lock: Any) -> list[str]:
    """A line for the tools lock (`tools_lock:`) and one per tool that drifted from it."""
    if not isinstance(lock, dict):
        return []
    listed = lock.get("drifted")
    drifted = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    lines = [f"  {'drifted' if drifted else 'pinned':<8} tools lock {clean(lock.get('file'))}"
             f"  {clean(lock.get('pinned'))} tools pinned, {len(drifted)} drifted"
             f" (on_drift: {clean(lock.get('on_drift'))})"]
    for d in drifted:
        changed = d.get("changed")
        fields = ", ".join(clean(c) for c in changed) if isinstance(changed, list) else ""
        what = clean(d["tool"]) if "tool" in d else f"{clean(d.get('item'))} {clean(d.get('name'))}"
        lines.append(f"    drifted  {what} ({clean(d.get('upstream'))}): {fields}")
    return lines
