"""Single sign-on for the approvals page, over HTTP against the real IdP: the sign-in, the session cookie, the CSRF
check, sign-out, and each hostile input that must not get anyone a session or a decision.

The app is built from its parts as gateway/app/root.py mounts them (the edge's Host/Origin guard and JSON-only
bodies, the session cookies, the sign-in routes, the approver API behind ``RequireIdentity``), so a test can give
the sessions a clock it moves. The whole gateway, in Chromium, is tests/e2e/test_approver_sso.py.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx2
import pytest
import pytest_asyncio
from idp_support import Client, Idp
from loopback import serve_app
from sso_support import HttpApprover, register_client
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from gateway.approvals.model import ApprovalState, Requirement
from gateway.auth.claims import ClaimMapping
from gateway.auth.jwks import IssuerKeys, JwksClient
from gateway.auth.jwt import JwtAuthenticator, JwtAuthenticators
from gateway.auth.sso import OidcClient, OidcFlow, SignIns
from gateway.auth.sso_sessions import Sessions
from gateway.frontends.approvals_api import approval_routes
from gateway.frontends.approvals_page import approvals_page_routes
from gateway.frontends.http.edge import HostOriginGuard, HostRules, JsonOnly
from gateway.frontends.identity import RequireIdentity
from gateway.frontends.sso import SessionCookies, SsoPages

LEADS = [Requirement("big-refund", "Refunds over 100 need a lead", ["group:leads"])]
ALGORITHMS = ["RS256", "ES256", "PS256", "EdDSA"]
ATTACKER = "http://127.0.0.1:9"  # another origin on the same site (an IP literal is its own site, whatever the port)


class Clock:
    """The sessions' clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Site:
    """The app on loopback, its parts, and browsers for it."""

    url: str
    pages: SsoPages
    clock: Clock
    desk: Any
    client: Client
    idp: Idp
    browsers: list[HttpApprover]

    def browser(self) -> HttpApprover:
        """A new browser (its own cookie jar)."""
        approver = HttpApprover(self.url, self.idp)
        self.browsers.append(approver)
        return approver

    def pending(self) -> Any:
        """A request only leads may decide."""
        return self.desk.add(principal="agent-7", requirements=LEADS)

    def state_of(self, approval: Any) -> ApprovalState:
        return self.desk.service.store.get(approval.id).state


MakeSite = Callable[..., Awaitable[Site]]


def authenticators(idp: Idp, rules: list[tuple[str, str]] | None = None) -> JwtAuthenticators:
    """The IdP's JWT authenticator, as ``auth.jwt`` builds it: keys from its JWKS, leads approve, security sees all."""
    client = JwksClient()
    mapping = ClaimMapping(id="claims.sub", groups="has(claims.groups) ? claims.groups : []", claims="claims",
                           rules=rules or [],
                           roles={"approver": '"leads" in principal.groups', "admin": '"security" in principal.groups'})
    keys = IssuerKeys(idp.issuer, None, ALGORITHMS, 3600, client)
    return JwtAuthenticators([JwtAuthenticator(idp.issuer, ["https://gateway.test/mcp"], ALGORITHMS, 30, keys,
                                               mapping)], client)


@pytest_asyncio.fixture
async def checker(idp: Idp) -> AsyncIterator[JwtAuthenticators]:
    """``authenticators(idp)`` for one test."""
    made = authenticators(idp)
    yield made
    await made.aclose()


@pytest_asyncio.fixture
async def make_site(idp: Idp, approval_desk: Any, checker: Any) -> AsyncIterator[MakeSite]:
    """``await make_site(http_client=None, allowed_origins=())``: the sign-in app on loopback."""
    async with contextlib.AsyncExitStack() as stack:

        async def make(http_client: httpx2.AsyncClient | None = None, allowed_origins: tuple[str, ...] = (),
                       auth_method: str = "client_secret_basic", public_url: str | None = None,
                       rules: list[tuple[str, str]] | None = None) -> Site:
            client = await register_client(idp, auth_method)
            chosen = checker
            if rules:
                chosen = authenticators(idp, rules)
                stack.push_async_callback(chosen.aclose)
            flow = OidcFlow(OidcClient(idp.issuer, client.client_id, client.client_secret,
                                       token_auth_method=auth_method), chosen, http=http_client)
            stack.push_async_callback(flow.aclose)
            clock = Clock()
            pages = SsoPages(flow, SignIns(), Sessions(3600, clock=clock), "Test IdP", public_url)
            protected = Starlette(routes=approval_routes(approval_desk.service),
                                  middleware=[Middleware(RequireIdentity, auth=approval_desk.auth)])
            app = Starlette(routes=[*approvals_page_routes(), *pages.routes(), Mount("/", app=protected)],
                            middleware=[Middleware(HostOriginGuard, hosts=HostRules.build([], ip_literals=True),
                                                   origins=frozenset(allowed_origins)),
                                        Middleware(JsonOnly), Middleware(SessionCookies, pages=pages)])
            url = await stack.enter_async_context(serve_app(app, lifespan="off", startup=15, grace=1))
            site = Site(url, pages, clock, approval_desk, client, idp, [])
            stack.push_async_callback(lambda: _close(site))
            return site

        yield make


async def _close(site: Site) -> None:
    for browser in site.browsers:
        await browser.aclose()


def with_query(url: str, **changes: str) -> str:
    """``url`` with some query parameters replaced."""
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


def set_cookies(response: httpx2.Response) -> list[str]:
    return response.headers.get_list("set-cookie")


# -- signing in -----------------------------------------------------------------------------------------------


async def test_an_approver_signs_in_and_decides_with_the_session_cookie(make_site: MakeSite) -> None:
    site = await make_site()
    approval = site.pending()
    alice = site.browser()
    answer = await alice.sign_in("alice", f"/approvals/{approval.id}")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{site.url}/approvals/{approval.id}"
    cookies = set_cookies(answer)
    session = next(c for c in cookies if c.startswith("gateway-approver="))
    attributes = {part.strip().lower() for part in session.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/", "max-age=3600"} <= attributes
    assert "secure" not in attributes  # plain http on loopback; https gets Secure and __Host- (test below)
    assert any(c.startswith('gateway-sso-login=""') or "max-age=0" in c.lower() for c in cookies
               if c.startswith("gateway-sso-login="))  # the sign-in's cookie is spent

    about = await alice.session()
    assert about is not None
    assert (about["principal"], about["groups"], about["approver"], about["admin"]) == \
        ("alice", ["leads", "eng"], True, False)
    listed = await alice.http.get("/v1/approvals")
    assert listed.status_code == 200 and [a["id"] for a in listed.json()["approvals"]] == [approval.id]

    decided = await alice.decide(approval.id, comment="fine")
    assert decided.status_code == 200, decided.text
    stored = site.desk.service.store.get(approval.id)
    assert stored.state is ApprovalState.APPROVED
    assert [(v.approver, v.approve) for v in stored.votes] == [("alice", True)]


async def test_over_https_the_cookies_are_secure_and_host_only(make_site: MakeSite) -> None:
    site = await make_site(public_url="https://gateway.test")
    answer = await site.browser().http.get("/approvals/sso/login")
    assert answer.headers["location"].startswith(site.idp.authorization_endpoint)
    assert "redirect_uri=https%3A%2F%2Fgateway.test%2Fapprovals%2Fsso%2Fcallback" in answer.headers["location"]
    (cookie,) = set_cookies(answer)
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert cookie.startswith("__Host-gateway-sso-login=")
    assert {"httponly", "secure", "path=/", "samesite=lax"} <= attributes
    assert not any(a.startswith("domain") for a in attributes)


async def test_signing_in_again_ends_the_browsers_old_session(make_site: MakeSite) -> None:
    site = await make_site()
    alice = site.browser()
    await alice.sign_in("alice")
    old = alice.http.cookies["gateway-approver"]
    await alice.sign_in("alice")
    assert alice.http.cookies["gateway-approver"] != old
    assert site.pages.sessions.get(old) is None and len(site.pages.sessions) == 1


async def test_a_client_secret_sent_in_the_body_works_too(make_site: MakeSite) -> None:
    site = await make_site(auth_method="client_secret_post")
    assert (await site.browser().sign_in("alice")).status_code == 303


async def test_the_next_page_is_never_another_site(make_site: MakeSite) -> None:
    site = await make_site()
    for wanted in ("https://evil.example/approvals", "//evil.example/approvals", "/approvals/../admin",
                   "/approvals\\@evil.example"):
        answer = await site.browser().sign_in("alice", wanted)
        assert answer.headers["location"] == f"{site.url}/approvals"


async def test_a_non_approver_signs_in_at_the_idp_but_gets_no_session(make_site: MakeSite) -> None:
    site = await make_site()
    approval = site.pending()
    bob = site.browser()
    answer = await bob.sign_in("bob")
    assert answer.status_code == 403
    assert "You signed in as bob, who may not decide approval requests" in answer.text
    assert not [c for c in set_cookies(answer) if c.startswith("gateway-approver=")]
    assert await bob.session() is None
    refused = await bob.decide(approval.id)
    assert refused.status_code == 401
    assert site.state_of(approval) is ApprovalState.PENDING


async def test_the_issuers_rules_hold_for_the_id_token_too(make_site: MakeSite) -> None:
    site = await make_site(rules=[('claims.email.endsWith("@example.test") && claims.sub != "mallory"',
                                   "this account is suspended")])
    mallory = site.browser()
    answer = await mallory.sign_in("mallory", groups=["leads"])  # a lead, but the rules refuse her
    assert answer.status_code == 403 and "cannot sign in here: this account is suspended" in answer.text
    assert await mallory.session() is None
    assert (await site.browser().sign_in("alice")).status_code == 303


# -- hostile callbacks ----------------------------------------------------------------------------------------


async def test_a_replayed_callback_gets_nothing(make_site: MakeSite) -> None:
    site = await make_site()
    alice = site.browser()
    callback = await alice.at_idp(await alice.start(), "alice")
    assert (await alice.back(callback)).status_code == 303
    replay = site.browser()  # the attacker who saw the URL, with no cookie...
    again = await replay.back(callback)
    assert again.status_code == 400 and "unknown, was used already or has expired" in again.text
    assert await replay.session() is None
    assert (await alice.back(callback)).status_code == 400  # ...and the same browser, twice


async def test_a_forged_state_gets_nothing(make_site: MakeSite) -> None:
    site = await make_site()
    alice = site.browser()
    callback = await alice.at_idp(await alice.start(), "alice")
    forged = await alice.back(with_query(callback, state="forged-" + "x" * 40))
    assert forged.status_code == 400
    assert "sign-in link is unknown" in forged.text
    assert await alice.session() is None
    missing = await alice.back(f"{site.url}/approvals/sso/callback?code=abc")
    assert missing.status_code == 400


async def test_a_callback_in_a_browser_that_did_not_start_the_sign_in_gets_nothing(make_site: MakeSite) -> None:
    """Login CSRF: the attacker starts a sign-in as themselves and sends the victim the callback URL. The
    victim's browser lacks the sign-in cookie (and with it the PKCE verifier's sign-in): refused, and spent."""
    site = await make_site()
    attacker, victim = site.browser(), site.browser()
    callback = await attacker.at_idp(await attacker.start(), "alice")
    answer = await victim.back(callback)
    assert answer.status_code == 400 and "started in another browser" in answer.text
    assert await victim.session() is None
    assert (await attacker.back(callback)).status_code == 400


async def test_an_id_token_for_another_sign_in_is_refused(make_site: MakeSite) -> None:
    """The code came back for this state, but the IdP was asked with another nonce: code injection."""
    site = await make_site()
    alice = site.browser()
    authorize = with_query(await alice.start(), nonce="someone-elses-nonce")
    answer = await alice.back(await alice.at_idp(authorize, "alice"))
    assert answer.status_code == 401 and "its nonce differs" in answer.text
    assert await alice.session() is None


async def test_the_idps_error_is_shown_only_as_a_code(make_site: MakeSite) -> None:
    site = await make_site()
    alice = site.browser()
    state = parse_qs(urlsplit(await alice.start()).query)["state"][0]
    denied = await alice.back(f"/approvals/sso/callback?{urlencode({'state': state, 'error': 'access_denied'})}")
    assert denied.status_code == 403 and "did not sign you in (access_denied)" in denied.text
    state = parse_qs(urlsplit(await alice.start()).query)["state"][0]
    odd = await alice.back(f"/approvals/sso/callback?{urlencode({'state': state, 'error': '<script>x</script>'})}")
    assert odd.status_code == 403 and "<script>" not in odd.text
    assert odd.headers["content-security-policy"].startswith("default-src 'none'")


# -- a hostile token endpoint ---------------------------------------------------------------------------------


class _TokenEndpointAnswering(httpx2.AsyncBaseTransport):
    """The real IdP over HTTP, except that its token endpoint answers with ``id_token()``."""

    def __init__(self, token_endpoint: str, id_token: Callable[[], str]) -> None:
        self.real = httpx2.AsyncHTTPTransport()
        self.token_endpoint = token_endpoint
        self.id_token = id_token

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and str(request.url) == self.token_endpoint:
            return httpx2.Response(200, json={"id_token": self.id_token(), "token_type": "Bearer", "access_token": "x"})
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


def token_endpoint_answering(idp: Idp, id_token: Callable[[], str]) -> httpx2.AsyncClient:
    """An HTTP client to the real IdP, except that the token endpoint answers with ``id_token()``: what the gateway
    sees if an attacker stands in the token endpoint's place (or an IdP bug mixes clients' tokens up)."""
    return httpx2.AsyncClient(transport=_TokenEndpointAnswering(idp.token_endpoint, id_token), follow_redirects=False,
                              timeout=15)


async def test_an_id_token_issued_to_another_client_is_refused(make_site: MakeSite, idp: Idp) -> None:
    other = await idp.user_tokens("alice")  # a real ID token of alice, for the IdP's public client
    site = await make_site(http_client=token_endpoint_answering(idp, lambda: str(other["id_token"])))
    alice = site.browser()
    answer = await alice.sign_in("alice")
    assert answer.status_code == 401 and "The ID token was refused (bad-audience)" in answer.text
    assert await alice.session() is None


async def test_an_id_token_with_the_right_audience_but_another_nonce_is_refused(make_site: MakeSite,
                                                                              idp: Idp) -> None:
    made: dict[str, str] = {}
    site = await make_site(http_client=token_endpoint_answering(idp, lambda: made["token"]))
    made["token"] = idp.sign({"sub": "alice", "aud": site.client.client_id, "nonce": "not-this-sign-ins",
                              "groups": ["leads"]}, header={"typ": "JWT"})
    alice = site.browser()
    answer = await alice.sign_in("alice")
    assert answer.status_code == 401 and "its nonce differs" in answer.text


# -- the session cookie ---------------------------------------------------------------------------------------


async def test_a_tampered_session_cookie_is_no_session(make_site: MakeSite) -> None:
    site = await make_site()
    approval = site.pending()
    alice = site.browser()
    await alice.sign_in("alice")
    value = alice.http.cookies["gateway-approver"]
    for forged in (value[:-1] + ("A" if value[-1] != "A" else "B"), value + "x", "", "x" * 200):
        mallory = site.browser()
        mallory.http.cookies.set("gateway-approver", forged, domain="127.0.0.1")
        mallory.csrf = alice.csrf  # even with the right CSRF token
        assert await mallory.session() is None
        assert (await mallory.decide(approval.id)).status_code == 401
    assert site.state_of(approval) is ApprovalState.PENDING


async def test_a_session_ends_at_its_lifetime_and_a_role_taken_away_ends_with_it(make_site: MakeSite,
                                                                                 idp: Idp) -> None:
    site = await make_site()
    first, second = site.pending(), site.pending()
    alice = site.browser()
    await alice.sign_in("alice")
    await idp.set_user("alice", groups=["eng"])  # alice leaves the leads at the IdP...
    site.clock.now += 3599
    assert (await alice.decide(first.id)).status_code == 200  # ...and may decide until her session ends
    site.clock.now += 2
    assert await alice.session() is None
    assert (await alice.decide(second.id, headers=alice.page_headers(**{"X-CSRF-Token": "stale"}))).status_code == 401
    again = await alice.sign_in("alice", groups=["eng"])  # signing in again reads her groups afresh
    assert again.status_code == 403
    assert site.state_of(second) is ApprovalState.PENDING


async def test_sign_out_ends_the_session_and_sends_the_browser_to_the_idp(make_site: MakeSite, idp: Idp) -> None:
    site = await make_site()
    approval = site.pending()
    alice = site.browser()
    await alice.sign_in("alice")
    value = alice.http.cookies["gateway-approver"]
    answer = await alice.sign_out()
    assert answer.status_code == 200, answer.text
    redirect = answer.json()["redirect"]
    assert redirect.startswith(str(idp.discovery["end_session_endpoint"]))
    query = parse_qs(urlsplit(redirect).query)
    assert query["post_logout_redirect_uri"] == [f"{site.url}/approvals"]
    assert query["client_id"] == [site.client.client_id] and query["id_token_hint"]
    assert any(c.startswith("gateway-approver=") and "max-age=0" in c.lower() for c in set_cookies(answer))
    # the old cookie, kept by a thief, is worth nothing now
    thief = site.browser()
    thief.http.cookies.set("gateway-approver", value, domain="127.0.0.1")
    thief.csrf = alice.csrf
    assert await thief.session() is None
    assert (await thief.decide(approval.id)).status_code == 401


# -- CSRF -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("headers", "why"), [
    ({"X-CSRF-Token": None}, "X-CSRF-Token"),
    ({"X-CSRF-Token": "a-token-of-another-session"}, "X-CSRF-Token"),
    ({"Origin": None}, "Origin"),
    ({"Origin": ATTACKER}, "Origin"),  # let past the edge by http.allowed_origins: the cookie still may not
    ({"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site"),
    ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site"),
])
async def test_a_decision_with_the_cookie_from_anywhere_but_the_page_is_refused(make_site: MakeSite,
                                                                               headers: dict[str, Any],
                                                                               why: str) -> None:
    site = await make_site(allowed_origins=(ATTACKER,))
    approval = site.pending()
    alice = site.browser()
    await alice.sign_in("alice")
    sent = {k: v for k, v in alice.page_headers(**{k: v for k, v in headers.items() if v}).items()
            if headers.get(k, "") is not None}
    refused = await alice.decide(approval.id, headers=sent)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "csrf-refused" and why in refused.json()["error"]["message"]
    assert site.state_of(approval) is ApprovalState.PENDING
    logout = await alice.http.post("/approvals/sso/logout", headers=sent, json={})
    assert logout.status_code == 403  # nor can another page sign the approver out
    assert await alice.session() is not None


async def test_a_key_in_a_header_is_judged_alone_and_the_cookie_ignored(make_site: MakeSite) -> None:
    site = await make_site()
    approval = site.pending()
    alice = site.browser()
    await alice.sign_in("alice")
    wrong_key = await alice.decide(approval.id, headers={**alice.page_headers(), "Authorization": "Bearer nope"})
    assert wrong_key.status_code == 401  # not alice's session
    carol = await alice.decide(approval.id, headers={**alice.page_headers(), "Authorization": "Bearer carol-key"})
    assert carol.status_code == 403  # carol's key may not decide; alice's cookie does not lend her the role
    assert site.state_of(approval) is ApprovalState.PENDING


async def test_the_page_learns_of_sso_and_of_its_session(make_site: MakeSite) -> None:
    site = await make_site()
    browser = site.browser()
    answer = await browser.http.get("/approvals/sso/session")
    assert answer.json() == {"sso": {"name": "Test IdP", "login": "/approvals/sso/login"}, "session": None}
    assert answer.headers["cache-control"] == "no-store"
    assert "access-control-allow-origin" not in answer.headers
    await browser.sign_in("alice")
    about = await browser.session()
    assert about is not None and re.fullmatch(r"[A-Za-z0-9_-]{40,}", about["csrf"])
