"""Checks of the identity settings against the rest of the config: approvers' sign-in and upstream ``auth:``.

They read the whole config, so they sit above the models they check (``sso.py``, ``upstream_auth.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from gateway.config.model import GatewayConfig
from gateway.config.upstreams import UpstreamSpec
from gateway.core.loopback import is_loopback, secure_url_problem

__all__ = ["auth_problems", "sso_problems"]

Problem = tuple[tuple[str | int, ...], str, str, str]  # (where in the config, code, message, hint)
Report = Callable[[tuple[str | int, ...], str, str, str], None]  # (path, code, message, hint)


def _loopback(host: str | None) -> bool:
    return host is not None and is_loopback(host)


def sso_problems(spec: GatewayConfig) -> list[Problem]:
    """What is wrong with ``approvals.sso`` given the rest of the config (empty when it is unset or right)."""
    sso = spec.approvals.sso
    if sso is None:
        return []
    out: list[Problem] = []
    issuers = [j.issuer.rstrip("/") for j in spec.auth.jwt]
    if sso.issuer.rstrip("/") not in issuers:
        out.append((("approvals", "sso", "issuer"), "sso-unknown-issuer",
                    f"approvals.sso.issuer {sso.issuer!r} is not one of auth.jwt's issuers",
                    "add it to auth.jwt (its principal mapping and roles decide who may approve), or use one"
                    f" listed there: {', '.join(issuers) or 'none is configured'}"))
    public = spec.approvals.public_url
    page = urlsplit(public) if public else None
    if page is not None and page.scheme != "https" and not _loopback(page.hostname):
        out.append((("approvals", "public_url"), "sso-needs-https",
                    f"approvals.sso needs an https approvals.public_url, not {public!r}: the session cookie and"
                    " the IdP's code would cross the network in the clear", "serve the page over https (e.g."
                    " behind a TLS proxy) and set approvals.public_url to its https address"))
    if page is None and not _loopback(spec.listen.host):
        out.append((("approvals", "sso"), "sso-needs-public-url",
                    "approvals.sso needs approvals.public_url when listen.host is not a loopback address: the"
                    " IdP sends approvers back to it", "set approvals.public_url to the page's https address"))
    return out


def auth_problems(upstreams: Sequence[UpstreamSpec], jwt_issuers: int, report: Report) -> None:
    """Report what is wrong with the upstreams' ``auth:`` in the context of the whole config.

    ``upstreams`` are the config's ``UpstreamSpec``s; ``jwt_issuers`` how many ``auth.jwt`` entries there are."""
    for i, up in enumerate(upstreams):
        kind = up.kind
        block = getattr(up, kind)
        auth = block.auth
        if auth is None:
            continue
        where = ("upstreams", i, kind, "auth")
        for name in block.headers:
            if name.lower() == "authorization":
                report(("upstreams", i, kind, "headers", name), "auth-conflict",
                       f"upstream {up.name!r} has both an Authorization header and 'auth'",
                       "remove the header: 'auth' sets Authorization on every request")
        if kind == "mcp" and block.url is None:
            report(where, "auth-unsupported", f"upstream {up.name!r}: 'auth' needs an MCP server over HTTP (url)",
                   "a stdio server gets its credentials from env")
        url_field = "url" if kind == "mcp" else "base_url"
        url = getattr(block, url_field)
        if url is not None and (problem := secure_url_problem(url)) is not None:
            report(("upstreams", i, kind, url_field), "auth-insecure-upstream",
                   f"upstream {up.name!r}: {url_field} {problem}, or its token would travel in clear text",
                   "serve the upstream over https, or give it no 'auth'")
        if auth.token_exchange is None:
            continue
        if kind == "mcp":
            report((*where, "token_exchange"), "auth-unsupported",
                   f"upstream {up.name!r}: token exchange is not available for MCP upstreams",
                   "an MCP upstream is one session shared by every caller, and servers bind a session to the user"
                   " who opened it; use client_credentials, or an http/openapi upstream")
        if jwt_issuers == 0:
            report((*where, "token_exchange"), "token-exchange-without-jwt",
                   f"upstream {up.name!r} exchanges the caller's token, but no caller can present one",
                   "configure auth.jwt (callers signed in with the identity provider), or use client_credentials")
