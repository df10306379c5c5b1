"""Sign-ins under way: a state is taken once, by the browser that started it, while it is fresh; PKCE is S256."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway.auth.jwt import JwtAuthenticators
from gateway.auth.sso import OidcClient, OidcFlow, SignIns, SsoRefused, error_word, pkce_challenge


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_pkce_is_s256_as_rfc_7636_computes_it():
    verifier, challenge = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    assert pkce_challenge(verifier) == challenge  # RFC 7636, appendix B


def test_each_sign_in_gets_its_own_secrets():
    signins = SignIns()
    one, browser_one = signins.start("http://127.0.0.1/cb", "/approvals")
    two, browser_two = signins.start("http://127.0.0.1/cb", "/approvals")
    assert len({one.state, one.nonce, one.verifier, two.state, two.nonce, two.verifier, browser_one, browser_two}) == 8
    assert browser_one not in (one.browser, two.browser)  # only its digest is kept
    assert len(one.verifier) >= 43  # RFC 7636: 43 to 128 characters


def test_a_state_is_taken_once():
    signins = SignIns()
    pending, browser = signins.start("http://127.0.0.1/cb", "/approvals")
    assert signins.finish(pending.state, browser) is pending
    with pytest.raises(SsoRefused) as replay:
        signins.finish(pending.state, browser)
    assert replay.value.reason == "bad-state"


@pytest.mark.parametrize("state", [None, "", "forged-state-value"])
def test_a_forged_or_missing_state_finds_nothing(state):
    signins = SignIns()
    signins.start("http://127.0.0.1/cb", "/approvals")
    with pytest.raises(SsoRefused) as refused:
        signins.finish(state, "whatever")
    assert refused.value.reason == "bad-state"
    assert len(signins) == 1


@pytest.mark.parametrize("browser", [None, "", "another-browsers-value"])
def test_the_state_must_come_back_to_the_browser_that_started_it(browser):
    signins = SignIns()
    pending, _ = signins.start("http://127.0.0.1/cb", "/approvals")
    with pytest.raises(SsoRefused) as refused:
        signins.finish(pending.state, browser)
    assert refused.value.reason == "other-browser"
    with pytest.raises(SsoRefused):  # and it is spent: the right browser cannot use it after an attempt
        signins.finish(pending.state, browser)


def test_a_sign_in_is_forgotten_after_ten_minutes():
    clock = Clock()
    signins = SignIns(clock=clock)
    pending, browser = signins.start("http://127.0.0.1/cb", "/approvals")
    clock.now += 601
    with pytest.raises(SsoRefused) as refused:
        signins.finish(pending.state, browser)
    assert refused.value.reason == "bad-state"


def test_anyone_may_start_sign_ins_but_the_table_stays_bounded():
    signins = SignIns(limit=3)
    first, browser = signins.start("http://127.0.0.1/cb", "/approvals")
    for _ in range(10):
        signins.start("http://127.0.0.1/cb", "/approvals")
    assert len(signins) == 3
    with pytest.raises(SsoRefused):
        signins.finish(first.state, browser)


@pytest.mark.parametrize(("error", "said"), [
    ("access_denied", " (access_denied)"), ("<script>", ""), ("x" * 65, ""), ("spaces here", ""), (None, ""),
    ("ünïcode", ""),
])
def test_only_an_oauth_error_code_is_repeated(error, said):
    assert error_word(error) == said


# -- discovery from a hostile or broken IdP ------------------------------------------------------------------


def _discovery_app() -> Starlette:
    """An IdP whose discovery document is wrong in one way per path prefix (its issuer is ``{base}/{case}``)."""

    async def document(request: Request) -> Response:
        case = request.path_params["case"]
        issuer = f"{request.base_url}{case}".rstrip("/")
        good = {"issuer": issuer, "authorization_endpoint": f"{issuer}/auth", "token_endpoint": f"{issuer}/token",
                "code_challenge_methods_supported": ["S256"]}
        if case == "redirects":  # to a document that would do, were it followed
            return RedirectResponse(f"{request.base_url}elsewhere/redirects", 302)
        if case == "huge":  # right in every field, and 2 MB long
            return JSONResponse({**good, "padding": "x" * (2 * 1024 * 1024)})
        if case == "garbage":
            return Response(b"<html>not json</html>", media_type="text/html")
        changes: dict[str, Any] = {
            "other-issuer": {"issuer": "https://idp.example.com"},
            "plain-http": {"authorization_endpoint": "http://idp.example.com/auth"},
            "no-s256": {"code_challenge_methods_supported": ["plain"]},
            "no-token-endpoint": {"token_endpoint": None},
            "fine": {},
        }[case]
        return JSONResponse({k: v for k, v in {**good, **changes}.items() if v is not None})

    async def elsewhere(request: Request) -> Response:
        issuer = f"{request.base_url}{request.path_params['case']}"
        return JSONResponse({"issuer": issuer, "authorization_endpoint": f"{issuer}/auth",
                             "token_endpoint": f"{issuer}/token"})

    return Starlette(routes=[Route("/{case}/.well-known/openid-configuration", document),
                             Route("/elsewhere/{case}", elsewhere)])


@pytest.mark.parametrize("case", ["redirects", "huge", "garbage", "other-issuer", "plain-http", "no-s256",
                                  "no-token-endpoint"])
async def test_a_discovery_document_that_cannot_be_trusted_stops_the_sign_in(serve: Any, case: str) -> None:
    base = await serve(_discovery_app())
    flow = OidcFlow(OidcClient(f"{base}/{case}", "gateway"), JwtAuthenticators([]))
    try:
        with pytest.raises(SsoRefused) as refused:
            await flow.authorization_url(SignIns().start(f"{base}/cb", "/approvals")[0])
        assert (refused.value.reason, refused.value.status) == ("idp-unavailable", 502)
        fine = OidcFlow(OidcClient(f"{base}/fine", "gateway"), JwtAuthenticators([]))
        assert (await fine.endpoints()).token == f"{base}/fine/token"  # the control: the same server, a good document
        await fine.aclose()
    finally:
        await flow.aclose()


def test_an_issuer_must_be_https_unless_it_is_this_machine() -> None:
    with pytest.raises(ValueError, match="https"):
        OidcFlow(OidcClient("http://idp.example.com", "gateway"), JwtAuthenticators([]))
