"""Single sign-on for the approvals page: the routes, the session cookie and its CSRF check.

    GET  /approvals/sso/login?next=/approvals/ID   start a sign-in: 303 to the IdP, a sign-in cookie set
    GET  /approvals/sso/callback?code=&state=      the IdP's answer: a session cookie set, 303 to ``next``
    GET  /approvals/sso/session                    {sso: {name, login}, session: null | {...}} for the page
    POST /approvals/sso/logout                     end the session; {redirect}: the IdP's sign-out, or the page

Two cookies, both HttpOnly (Secure, with the ``__Host-`` prefix, when the page is served over https):

    gateway-sso-login   the browser's half of one sign-in (state, nonce and PKCE verifier stay here);
                        SameSite=Lax, because the IdP's redirect back is a cross-site navigation
    gateway-approver    the session; SameSite=Strict, so no other site's page or link ever sends it

The session cookie authenticates the approver API (``/v1/approvals…``) and sign-out, and nothing else:
never ``/mcp``, the REST API or the admin API. A request that carries an ``Authorization`` or ``X-API-Key``
header is judged by that alone. A change made with the cookie (any method but GET and HEAD) must also
come from this page itself: its ``Origin`` is the page's own, ``Sec-Fetch-Site`` (when sent) is
``same-origin``, and ``X-CSRF-Token`` holds the session's token, which only this origin can read (from
``/approvals/sso/session``; nothing here answers CORS). Otherwise it is refused with 403 before its body
is read.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.sso import SSO_REFUSAL_REASONS, OidcFlow, SignIns, SsoRefused, error_word
from gateway.auth.sso_sessions import Session, Sessions
from gateway.core.clock import rfc3339
from gateway.core.limits import SSO_LOGIN_SECONDS
from gateway.frontends.identity import IDENTITY_KEY
from gateway.frontends.rest import error_response

__all__ = ["SESSION_KEY", "SessionCookies", "SsoPages"]

log = logging.getLogger("gateway.sso")

SESSION_KEY = "gateway.sso_session"
_LOGIN, _SESSION = "gateway-sso-login", "gateway-approver"
_SAFE = frozenset({"GET", "HEAD"})
_NEXT = re.compile(r"/approvals(?:/[A-Za-z0-9_-]{1,64})?")
_CREDENTIAL_HEADERS = (b"authorization", b"x-api-key")
_NO_STORE = {"cache-control": "no-store", "referrer-policy": "no-referrer"}
# Pages said here carry no script and load nothing.
_PAGE_HEADERS = {**_NO_STORE, "content-security-policy": "default-src 'none'; base-uri 'none'; form-action 'none';"
                 " frame-ancestors 'none'", "x-content-type-options": "nosniff", "x-frame-options": "DENY"}


def _header(scope: Scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope["headers"] if k == name]


def _cookie(scope: Scope, name: str) -> str | None:
    """The one value of cookie ``name``; None when absent or sent more than once (which one would be ours?)."""
    found = [value.strip() for header in _header(scope, b"cookie") for part in header.split(";")
             for key, sep, value in [part.partition("=")] if sep and key.strip() == name]
    return found[0] if len(found) == 1 else None


def _session_path(path: str) -> bool:
    return path == "/v1/approvals" or path.startswith("/v1/approvals/") or path in (
        "/approvals/sso/logout", "/approvals/sso/session")


@dataclass(frozen=True, slots=True)
class _Site:
    """Where the page is, as this request reaches it."""

    base: str  # e.g. https://gateway.example.com (no trailing slash)

    @property
    def secure(self) -> bool:
        return self.base.startswith("https://")

    @property
    def origin(self) -> str:
        scheme, _, rest = self.base.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}".lower()

    def name(self, cookie: str) -> str:
        return f"__Host-{cookie}" if self.secure else cookie  # __Host-: Secure, Path=/, no Domain: no one else sets it


class SsoPages:
    """The sign-in routes over one IdP flow, its sign-ins under way and the sessions."""

    def __init__(self, flow: OidcFlow, signins: SignIns, sessions: Sessions, name: str,
                 public_url: str | None = None, *, refused: Callable[[str], None] | None = None) -> None:
        self.flow = flow
        self.signins = signins
        self.sessions = sessions
        self.name = name
        self.public_url = public_url.rstrip("/") if public_url else None
        self._refused = refused  # told each refused sign-in's reason (``gateway_sso_refusals_total``)

    def _count(self, reason: str) -> None:
        """Count a refused sign-in by its reason, one of ``SSO_REFUSAL_REASONS`` (anything else as ``other``)."""
        if self._refused is not None:
            self._refused(reason if reason in SSO_REFUSAL_REASONS else "other")

    def site(self, scope: Scope) -> _Site:
        """The page's base URL: ``approvals.public_url``, else this request's own (its Host passed the edge)."""
        if self.public_url:
            return _Site(self.public_url)
        hosts = _header(scope, b"host")
        return _Site(f"{scope.get('scheme', 'http')}://{hosts[0].strip() if hosts else 'localhost'}")

    def session_of(self, scope: Scope) -> tuple[str | None, Session | None]:
        """The session cookie's value and its live session, if any."""
        value = _cookie(scope, self.site(scope).name(_SESSION))
        return value, self.sessions.get(value)

    def csrf_problem(self, scope: Scope, session: Session) -> str | None:
        """Why a change made with this session's cookie does not come from the page itself, or None."""
        origins = _header(scope, b"origin")
        if len(origins) != 1 or origins[0].strip().lower() != self.site(scope).origin:
            return "it does not come from the approvals page (Origin)"
        fetch_site = _header(scope, b"sec-fetch-site")
        if fetch_site and fetch_site != ["same-origin"]:
            return "it does not come from the approvals page (Sec-Fetch-Site)"
        tokens = _header(scope, b"x-csrf-token")
        if len(tokens) != 1 or not session.csrf_matches(tokens[0]):
            return "it lacks this session's X-CSRF-Token"
        return None

    def routes(self) -> list[Route]:
        """The sign-in routes (no key: the login and callback need none, the rest read the cookie)."""
        return [Route("/approvals/sso/login", self.login, methods=["GET"]),
                Route("/approvals/sso/callback", self.callback, methods=["GET"]),
                Route("/approvals/sso/session", self.session, methods=["GET"]),
                Route("/approvals/sso/logout", self.logout, methods=["POST"])]

    async def login(self, request: Request) -> Response:
        """Start a sign-in: remember its state, nonce and verifier, and send the browser to the IdP."""
        site = self.site(request.scope)
        wanted = request.query_params.get("next", "/approvals")
        next_path = wanted if _NEXT.fullmatch(wanted) else "/approvals"  # never a redirect to anywhere else
        pending, browser = self.signins.start(f"{site.base}/approvals/sso/callback", next_path)
        try:
            url = await self.flow.authorization_url(pending)
        except SsoRefused as exc:
            self._count(exc.reason)
            return _page(site, exc.status, "Cannot sign in now", str(exc))
        response = RedirectResponse(url, 303, headers=_NO_STORE)
        response.set_cookie(site.name(_LOGIN), browser, max_age=int(SSO_LOGIN_SECONDS), path="/",
                            secure=site.secure, httponly=True, samesite="lax")
        return response

    async def callback(self, request: Request) -> Response:
        """The IdP's answer: check it belongs to a sign-in this browser started, then start a session."""
        site, query = self.site(request.scope), request.query_params
        browser = _cookie(request.scope, site.name(_LOGIN))
        try:
            pending = self.signins.finish(query.get("state"), browser)
            if "error" in query:
                said = error_word(query["error"])
                raise SsoRefused("idp-refused", f"The identity provider did not sign you in{said}.", 403)
            identity, id_token = await self.flow.finish(pending, query.get("code"))
        except SsoRefused as exc:
            log.warning("approvals page: a sign-in was refused (%s)", exc.reason)  # the reason only: no token, no code
            self._count(exc.reason)
            response = _page(site, exc.status, "Sign-in failed", str(exc))
        else:
            log.info("approvals page: %r signed in with %s (approver %s, admin %s)", identity.principal.id,
                     self.flow.client.issuer, identity.approver, identity.admin)
            if not (identity.approver or identity.admin):
                self._count("not-approver")
                response = _page(site, 403, "Not an approver", (
                    f"You signed in as {identity.principal.id}, who may not decide approval requests here."
                    " Ask for the approver role, or sign in with another account."))
            else:
                self.sessions.end(_cookie(request.scope, site.name(_SESSION)))  # a new sign-in, a new session
                value, _ = self.sessions.create(identity, id_token)
                response = RedirectResponse(f"{site.base}{pending.next_path}", 303, headers=_NO_STORE)
                response.set_cookie(site.name(_SESSION), value, max_age=int(self.sessions.lifetime), path="/",
                                    secure=site.secure, httponly=True, samesite="strict")
        response.delete_cookie(site.name(_LOGIN), path="/", secure=site.secure, httponly=True, samesite="lax")
        return response

    async def session(self, request: Request) -> JSONResponse:
        """Whether this browser is signed in, as whom, until when, and the CSRF token for its changes."""
        _, session = self.session_of(request.scope)
        about: dict[str, object] | None = None
        if session is not None:
            principal = session.identity.principal
            about = {"principal": principal.id, "groups": list(principal.groups),
                     "approver": session.identity.approver, "admin": session.identity.admin,
                     "expires_at": rfc3339(session.expires_at), "csrf": session.csrf}
        return JSONResponse({"sso": {"name": self.name, "login": "/approvals/sso/login"}, "session": about},
                            headers=_NO_STORE)

    async def logout(self, request: Request) -> JSONResponse:
        """End this browser's session (``SessionCookies`` checked it came from the page) and say where to go."""
        site = self.site(request.scope)
        session = request.scope.get(SESSION_KEY)
        page = f"{site.base}/approvals"
        if not isinstance(session, Session):
            return error_response(401, "not-signed-in", "This browser has no session to sign out of.")
        value, _ = self.session_of(request.scope)
        self.sessions.end(value)
        redirect = await self.flow.end_session_url(session.id_token, page)
        response = JSONResponse({"redirect": redirect or page, "idp": redirect is not None}, headers=_NO_STORE)
        response.delete_cookie(site.name(_SESSION), path="/", secure=site.secure, httponly=True, samesite="strict")
        return response


def _page(site: _Site, status: int, title: str, message: str) -> Response:
    body = (f"<!doctype html><html lang=en><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1 data-testid=sso-title>{html.escape(title)}</h1><p data-testid=sso-message>{html.escape(message)}</p>"
            f"<p><a href=\"{html.escape(site.base)}/approvals\">Back to the approvals page</a></p></html>")
    return Response(body, status, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)


class SessionCookies:
    """ASGI middleware, before the connection shares: the session cookie as the approver's identity, on
    the approver API and sign-out only, for requests that send no key; changes must pass the CSRF check."""

    def __init__(self, app: ASGIApp, pages: SsoPages) -> None:
        self.app = app
        self.pages = pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and _session_path(scope["path"])
                and not any(k in _CREDENTIAL_HEADERS for k, _ in scope["headers"])):
            _, session = self.pages.session_of(scope)
            if session is not None:
                problem = None if scope["method"] in _SAFE else self.pages.csrf_problem(scope, session)
                if problem is not None:
                    response = error_response(403, "csrf-refused", f"Refused: {problem}. Decide from the approvals"
                                              " page itself.")
                    response.headers["connection"] = "close"  # the body is not read
                    await response(scope, receive, send)
                    return
                scope[IDENTITY_KEY] = session.identity
                scope[SESSION_KEY] = session
        await self.app(scope, receive, send)
