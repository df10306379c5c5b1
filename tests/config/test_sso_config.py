"""`approvals.sso` mistakes: each one positioned at its file:line:col, with a hint, nothing started."""

from __future__ import annotations

import pytest

from gateway.config.load import check_config

ISSUER = "https://idp.example.com"


def sso(extra: str = "", issuer: str = ISSUER) -> str:
    return f"approvals:\n  sso:\n    issuer: {issuer}\n    client_id: gateway-approvals\n{extra}"


def test_the_issuer_must_be_one_the_gateway_accepts_tokens_from(config):
    loaded, (d,) = check_config(config(sso()))
    assert loaded is None
    assert (d.code, d.line, d.column) == ("sso-unknown-issuer", 3, 13)
    assert "auth.jwt" in d.message and "add it to auth.jwt" in (d.hint or "")


@pytest.mark.parametrize(("extra", "code", "words"), [
    ("    scopes: [profile, email]\n", "invalid-value", "must include 'openid'"),
    ("    scopes: [openid, 'two words']\n", "invalid-value", "not a scope token"),
    ("    session_lifetime: 48h\n", "invalid-value", "between 1m and 24h"),
    ("    session_lifetime: 10s\n", "invalid-value", "between 1m and 24h"),
    ("    session_lifetime: soon\n", "invalid-value", "30s"),
    ("    token_auth_method: private_key_jwt\n", "invalid-value", "client_secret_basic"),
    ("    client_secret: plain-text\n", "wrong-type", "client_secret"),  # a secret is {env:} or {file:}
])
def test_settings_that_cannot_work_are_refused_where_they_are_written(config, extra, code, words):
    loaded, problems = check_config(config(sso(extra)))
    assert loaded is None
    first = problems[0]
    assert (first.code, first.line) == (code, 5), problems
    assert words in first.message


def test_a_session_cookie_never_crosses_the_network_in_the_clear(config):
    text = "approvals:\n  public_url: http://gateway.example.com\n" + sso()[len("approvals:\n"):]
    problems = check_config(config(text))[1]
    found = {(d.code, d.line, d.column) for d in problems}
    assert ("sso-needs-https", 2, 15) in found
    assert "https" in next(d.hint for d in problems if d.code == "sso-needs-https")


def test_beyond_loopback_the_page_needs_its_public_address(config):
    text = "listen: {host: 0.0.0.0, port: 8080}\n" + sso()
    problems = check_config(config(text))[1]
    assert "sso-needs-public-url" in {d.code for d in problems}


JWT = ("auth:\n  jwt:\n    - issuer: https://idp.example.com\n      audiences: [https://gateway.example.com/mcp]\n"
       "      roles: {approver: '\"leads\" in principal.groups'}\n")


def test_an_issuer_of_auth_jwt_loads_with_the_defaults(config):
    loaded, problems = check_config(config(JWT + "approvals:\n  public_url: https://gateway.example.com\n"
                                           + sso()[len("approvals:\n"):]))
    assert problems == [] and loaded is not None
    sso_spec = loaded.spec.approvals.sso
    assert sso_spec is not None
    assert (sso_spec.scopes, sso_spec.lifetime_seconds(), sso_spec.display_name(), sso_spec.client_secret) == \
        (["openid", "profile", "email"], 3600, "idp.example.com", None)
    other = check_config(config(JWT + sso(issuer="https://other.example.com")))[1]
    assert [d.code for d in other] == ["sso-unknown-issuer"]
    assert "https://idp.example.com" in (other[0].hint or "")  # the issuers it could be

