"""The approvals page: one self-contained HTML page for approvers, served without authentication.

    GET /approvals        pending requests, refreshed every 2 s
    GET /approvals/{id}   the same page, with that request first (the link in progress messages and webhooks)

The page holds no data: it asks for an approver's API key and reads and decides requests through
the approver API (``approvals_api``), which checks the key on every call. It is one view of the operator console
(``console_page``): it shares the console's header and navigation, style sheet and helpers (``static/common.*``).
Its scripts (common.js; approvals_run.js, what a held call's run did before; approvals_edit.js, an approver's
edit of the arguments; approvals_card.js, one request; approvals.js) are inlined and pinned by hash
(``inlined_page``).
"""

from __future__ import annotations

from starlette.routing import Route

from gateway.frontends.inlined_page import inlined_page, page_routes

__all__ = ["approvals_page_routes"]

_STYLES = ("common.css", "approvals.css")
# In this order: each uses those before it.
_SCRIPTS = ("common.js", "approvals_run.js", "approvals_edit.js", "approvals_card.js", "approvals.js")


def approvals_page_routes() -> list[Route]:
    """Routes for the page (no authentication: the API behind it checks the approver's key)."""
    page = inlined_page("approvals.html", _STYLES, _SCRIPTS)
    return page_routes(page, ["/approvals", "/approvals/{approval_id}"])
