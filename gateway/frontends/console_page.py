"""The operator console: one self-contained web app for admins, served without authentication.

    GET /console    the views, as hash routes: #/runs, #/runs/{principal}/{run} (a run's timeline),
                    #/decisions, #/policies, #/upstreams; the approvals page (/approvals) is its fifth view

The page holds no data: it asks for an API key, kept in the tab, asks ``GET /v1/admin/whoami`` which views the key
may use (an admin's: all; an approver's: the approvals and the timelines of runs whose calls it may decide), and
reads everything through the admin API, which checks the key on every call (docs/console.md). Its style sheets
(common.css, shared with the approvals page, and console.css) and scripts (common.js; console_kit.js, what the
views share; one file per view; console.js, sign-in and the routes) are inlined and pinned by hash
(``inlined_page``).
"""

from __future__ import annotations

from starlette.routing import Route

from gateway.frontends.inlined_page import inlined_page, page_routes

__all__ = ["console_page_routes"]

_STYLES = ("common.css", "console.css")
# In this order: each uses those before it; console.js starts the app once every view has registered.
_SCRIPTS = ("common.js", "console_kit.js", "console_runs.js", "console_chart.js", "console_decisions.js",
            "console_policies.js", "console_upstreams.js", "console.js")


def console_page_routes() -> list[Route]:
    """The console's route (no authentication: the admin API behind it checks the key)."""
    return page_routes(inlined_page("console.html", _STYLES, _SCRIPTS), ["/console"])
