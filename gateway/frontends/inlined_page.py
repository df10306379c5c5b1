"""The gateway's pages for people (the approvals page, the operator console): one HTML file from ``static/`` with
its style sheets and scripts inlined when the routes are built, served with a Content-Security-Policy that allows
exactly those by hash.

So no other script or style can run on a page (a hostile string that reached the DOM as markup would still run
nothing), and a page talks to nothing but this gateway (``connect-src 'self'``). A page holds no data and needs no
key: the APIs behind it check the key on every call.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["InlinedPage", "inlined_page", "page_routes"]

_STATIC = resources.files("gateway.frontends") / "static"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@dataclass(frozen=True)
class InlinedPage:
    """A page ready to serve: its bytes and the headers that pin what it runs."""

    body: bytes
    headers: dict[str, str]


def inlined_page(html: str, styles: Sequence[str], scripts: Sequence[str]) -> InlinedPage:
    """``static/html`` with each of ``styles`` and ``scripts`` (names in ``static/``) put in place of its
    ``/*! NAME */`` marker, which the HTML must hold exactly once (inside a ``<style>`` or ``<script>``)."""
    page = (_STATIC / html).read_text(encoding="utf-8")
    texts = {name: (_STATIC / name).read_text(encoding="utf-8") for name in [*styles, *scripts]}
    for name, text in texts.items():
        marker = f"/*! {name} */"
        if page.count(marker) != 1:
            raise RuntimeError(f"static/{html} must contain {marker!r} exactly once")
        page = page.replace(marker, text)
    csp = "; ".join([
        "default-src 'none'", f"script-src {' '.join(_hash(texts[s]) for s in scripts)}",
        f"style-src {' '.join(_hash(texts[s]) for s in styles)}", "connect-src 'self'", "img-src data:",
        "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    ])
    headers = {
        "content-security-policy": csp,
        "cache-control": "no-store",
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
    }
    return InlinedPage(page.encode(), headers)


def page_routes(page: InlinedPage, paths: Sequence[str]) -> list[Route]:
    """GET routes that serve ``page`` at each of ``paths`` (no authentication: the APIs behind it check keys)."""

    async def serve(request: Request) -> Response:
        return Response(page.body, media_type="text/html; charset=utf-8", headers=page.headers)

    return [Route(path, serve, methods=["GET"]) for path in paths]
