"""The approvals page: one self-contained HTML page for approvers, served without authentication.

    GET /approvals        pending requests, refreshed every 2 s
    GET /approvals/{id}   the same page, with that request first (the link in progress messages and webhooks)

The page holds no data: it asks for an approver's API key and reads and decides requests through
the approver API (``approvals_api``), which checks the key on every call. The CSS and scripts
(approvals.js, approvals_run.js for what a held call's run did before, and approvals_edit.js for editing the
arguments before approving) are inlined when the routes are built, and the Content-Security-Policy allows
exactly those by hash, so no other script can run on the page and it talks to nothing but this gateway.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["approvals_page_routes"]

_STATIC = resources.files("gateway.frontends") / "static"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


_SCRIPTS = ("approvals_run.js", "approvals_edit.js", "approvals.js")  # in this order: the last uses the others


def _page() -> tuple[bytes, dict[str, str]]:
    """The page with its CSS and scripts inlined, and the headers that pin them."""
    html = (_STATIC / "approvals.html").read_text(encoding="utf-8")
    css = (_STATIC / "approvals.css").read_text(encoding="utf-8")
    scripts = [(_STATIC / name).read_text(encoding="utf-8") for name in _SCRIPTS]
    for name, text in [("approvals.css", css), *zip(_SCRIPTS, scripts, strict=True)]:
        marker = f"/*! {name} */"
        if html.count(marker) != 1:
            raise RuntimeError(f"static/approvals.html must contain {marker!r} exactly once")
        html = html.replace(marker, text)
    csp = "; ".join([
        "default-src 'none'", f"script-src {' '.join(_hash(js) for js in scripts)}", f"style-src {_hash(css)}",
        "connect-src 'self'", "img-src data:", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    ])
    headers = {
        "content-security-policy": csp,
        "cache-control": "no-store",
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
    }
    return html.encode(), headers


def approvals_page_routes() -> list[Route]:
    """Routes for the page (no authentication: the API behind it checks the approver's key)."""
    body, headers = _page()

    async def page(request: Request) -> Response:
        return Response(body, media_type="text/html; charset=utf-8", headers=headers)

    return [
        Route("/approvals", page, methods=["GET"]),
        Route("/approvals/{approval_id}", page, methods=["GET"]),
    ]
