"""`auth.jwt` mistakes: every expression compiled and type-checked at load, positioned; unsafe settings refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.load import check_config, load_config
from gateway.core.errors import ConfigError

HEAD = "auth:\n  jwt:\n    - issuer: https://idp.example.com\n      audiences: [https://gw.example.com/mcp]\n"


def problems(path: Path) -> list[tuple[str, int, int, str]]:
    loaded, diagnostics = check_config(path)
    assert loaded is None
    return [(d.code, d.line, d.column, d.message) for d in diagnostics]


def test_the_issues_example_loads_with_every_expression(config):
    loaded = load_config(config(HEAD + """\
      algorithms: [RS256, ES256, PS256, EdDSA]
      clock_skew: 30s
      principal:
        id: claims.sub
        groups: 'has(claims.groups) ? claims.groups : []'
        claims: '{"email": claims.email, "tenant": claims.tid}'
      rules:
        - expression: 'claims.scope.split(" ").exists(s, s == "mcp")'
          message: the token lacks the mcp scope
      roles:
        approver: '"leads" in principal.groups'
        admin: 'false'
        metrics: 'false'
"""))
    [spec] = loaded.spec.auth.jwt
    assert (spec.issuer, spec.jwks_max_age, spec.required_scopes) == ("https://idp.example.com", "24h", [])


def test_each_bad_expression_is_an_error_at_its_line_and_column(config):
    path = config(HEAD + """\
      principal:
        id: '42'
        groups: '"eng"'
        claims: '[claims.email]'
      rules:
        - expression: 'claims.scope +'
          message: broken
      roles:
        approver: 'principal.gruops.exists(g, g == "leads")'
        admin: 'claims.admin == true'
        metrics: '"yes"'
""")
    found = problems(path)
    assert [(code, line, column) for code, line, column, _ in found] == [
        ("cel-type", 6, 14),  # id: a string, not an int (at the expression's first character)
        ("cel-type", 7, 18),  # groups: a list of strings
        ("cel-type", 8, 18),  # claims: a map
        ("cel-compile", 10, 37),  # the syntax error's own column
        ("cel-field", 13, 29),  # principal has no field gruops (at its '.')
        ("cel-undeclared", 14, 23),  # roles read principal, not claims
        ("cel-type", 15, 19),  # a role is a bool
    ]
    assert "did you mean 'groups'" in found[4][3]
    with pytest.raises(ConfigError) as failed:  # and the config does not load
        load_config(path)
    assert "gateway.yaml:13:29: error[cel-field]" in str(failed.value)


@pytest.mark.parametrize("alg", ["none", "HS256", "hs512"])
def test_none_and_hmac_are_refused_whatever_the_config_says(config, alg):
    path = config(HEAD + f"      algorithms: [RS256, {alg}]\n")
    [(code, line, _, message)] = problems(path)
    assert (code, line) == ("invalid-value", 5)
    assert "is never accepted" in message


@pytest.mark.parametrize(("url", "ok"), [
    ("https://idp.example.com", True), ("http://127.0.0.1:8080", True), ("http://localhost:9000/realms/x", True),
    ("http://[::1]:9000", True), ("http://idp.example.com", False), ("http://10.0.0.1", False),
    ("ftp://idp.example.com", False), ("https://", False),
])
def test_issuers_and_jwks_uris_are_https_or_loopback_http(config, url, ok):
    for text in (f"auth:\n  jwt:\n    - issuer: '{url}'\n      audiences: [a]\n",
                 f"auth:\n  jwt:\n    - issuer: https://idp.example.com\n      jwks_uri: '{url}'\n"
                 "      audiences: [a]\n"):
        loaded, diagnostics = check_config(config(text))
        assert (loaded is not None) is ok, diagnostics


def test_an_issuer_listed_twice_is_an_error(config):
    path = config("auth:\n  jwt:\n    - {issuer: 'https://a.example', audiences: [x]}\n"
                  "    - {issuer: 'https://a.example', audiences: [y]}\n")
    [(code, line, _, _)] = problems(path)
    assert (code, line) == ("duplicate-issuer", 4)


def test_audiences_are_required_and_durations_checked(config):
    path = config("auth:\n  jwt:\n    - issuer: https://a.example\n      audiences: []\n      clock_skew: soon\n"
                  "      jwks_max_age: 0s\n")
    assert [(code, line) for code, line, _, _ in problems(path)] == [
        ("invalid-value", 4), ("invalid-value", 5), ("invalid-value", 6)]


@pytest.mark.parametrize(("field", "value", "ok"), [
    ("clock_skew", "5m", True), ("clock_skew", "1s", True), ("clock_skew", "301s", False), ("clock_skew", "-1s", False),
    ("jwks_max_age", "1m", True), ("jwks_max_age", "59s", False),
])
def test_the_skew_stays_small_and_keys_live_longer_than_the_refetch_limit(config, field, value, ok):
    loaded, diagnostics = check_config(config(HEAD + f"      {field}: {value}\n"))
    assert (loaded is not None) is ok, diagnostics
    if not ok:
        assert [(d.code, d.line) for d in diagnostics] == [("invalid-value", 5)]
