"""An upstream's ``auth:`` in gateway.yaml: what loads, and each mistake positioned with a stable code and a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.load import check_config, load_config

POLICY = "policy: p\nrules: [{id: r, action: allow}]\n"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``config(upstream_block)`` writes gateway.yaml with one upstream and returns its path."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICY)
    monkeypatch.setenv("IDP_SECRET", "s3cr3t-value")

    def write(text: str, head: str = "") -> Path:
        path = tmp_path / "gateway.yaml"
        path.write_text(f"policies: [policies]\n{head}upstreams:\n{text}")
        return path
    return write


def problems(path: Path) -> list[tuple[str, int, int, str | None]]:
    loaded, diagnostics = check_config(path)
    assert loaded is None
    return [(d.code, d.line, d.column, d.hint) for d in diagnostics]


CLIENT_CREDENTIALS = """\
  - name: billing
    http:
      base_url: https://billing.example.com
      auth:
        client_credentials:
          token_url: https://idp.example.com/oauth2/token
          client_id: gateway
          client_secret: {env: IDP_SECRET}
          resource: https://billing.example.com
          scopes: [billing.read, billing.write]
"""


def test_client_credentials_loads(config):
    loaded = load_config(config(CLIENT_CREDENTIALS))
    http = loaded.spec.upstreams[0].http
    assert http is not None and http.auth is not None
    grant = http.auth.grant
    assert (grant.client_id, grant.resource, grant.scopes) == ("gateway", "https://billing.example.com",
                                                               ["billing.read", "billing.write"])
    assert http.auth.token_exchange is None


def test_token_exchange_needs_a_jwt_issuer_whose_tokens_could_be_exchanged(config):
    path = config("""\
  - name: billing
    openapi:
      spec: https://billing.example.com/openapi.json
      auth:
        token_exchange:
          issuer: https://idp.example.com
          client_id: gateway
          client_secret: {env: IDP_SECRET}
          audience: billing
""")
    [(code, line, column, hint)] = problems(path)
    assert (code, line, column) == ("token-exchange-without-jwt", 8, 11)
    assert hint is not None and "auth.jwt" in hint


def test_exactly_one_grant(config):
    path = config("""\
  - name: billing
    http:
      base_url: https://billing.example.com
      auth: {}
""")
    [(code, line, _, _)] = problems(path)
    assert (code, line) == ("invalid-value", 6)


def test_a_client_secret_is_never_a_literal(config):
    path = config(CLIENT_CREDENTIALS.replace("{env: IDP_SECRET}", "hunter2-literal"))
    found = problems(path)
    assert found and found[0][1] == 10  # the client_secret line


@pytest.mark.parametrize("url", ["http://idp.example.com/token", "ftp://idp.example.com/token", "token"])
def test_the_token_endpoint_is_https_or_loopback(config, url):
    path = config(CLIENT_CREDENTIALS.replace("https://idp.example.com/oauth2/token", url))
    [(code, line, _, _)] = problems(path)
    assert (code, line) == ("invalid-value", 8)


def test_plain_http_to_loopback_is_allowed(config):
    assert load_config(config(CLIENT_CREDENTIALS.replace("https://idp.example.com/oauth2/token",
                                                         "http://127.0.0.1:9/token")))


def test_token_url_or_issuer_not_both(config):
    path = config(CLIENT_CREDENTIALS.replace("          client_id", "          issuer: https://idp.example.com\n"
                                                                     "          client_id", 1))
    [(code, line, _, _)] = problems(path)
    assert (code, line) == ("invalid-value", 8)


def test_an_authorization_header_beside_auth_is_refused(config):
    path = config(CLIENT_CREDENTIALS.replace("      auth:\n", "      headers: {Authorization: {env: IDP_SECRET}}\n"
                                                              "      auth:\n"))
    [(code, line, _, hint)] = problems(path)
    assert (code, line) == ("auth-conflict", 6)
    assert hint is not None and "remove the header" in hint


def test_token_exchange_is_refused_for_mcp_upstreams(config):
    path = config("""\
  - name: tools
    mcp:
      url: https://tools.example.com/mcp
      auth:
        token_exchange:
          token_url: https://idp.example.com/token
          client_id: gateway
          client_secret: {env: IDP_SECRET}
""")
    found = problems(path)
    assert ("auth-unsupported", 8, 11) in [f[:3] for f in found]
    assert any(f[3] is not None and "client_credentials" in f[3] for f in found)


def test_client_credentials_for_an_mcp_server_over_http_loads(config):
    loaded = load_config(config("""\
  - name: tools
    mcp:
      url: https://tools.example.com/mcp
      auth:
        client_credentials:
          issuer: https://idp.example.com
          client_id: gateway
          client_secret: {env: IDP_SECRET}
"""))
    assert loaded.spec.upstreams[0].mcp is not None


def test_auth_for_a_stdio_server_is_refused(config):
    path = config("""\
  - name: tools
    mcp:
      command: python
      auth:
        client_credentials:
          issuer: https://idp.example.com
          client_id: gateway
          client_secret: {env: IDP_SECRET}
""")
    [(code, line, _, _)] = problems(path)
    assert (code, line) == ("auth-unsupported", 7)


def test_a_missing_client_secret_is_reported_where_it_is_named(config, monkeypatch):
    monkeypatch.delenv("IDP_SECRET")
    [(code, line, column, _)] = problems(config(CLIENT_CREDENTIALS))
    assert (code, line, column) == ("secret-missing", 10, 26)


@pytest.mark.parametrize("kind, field", [("http", "base_url"), ("mcp", "url")])
def test_a_token_never_goes_to_an_upstream_over_plain_http(config, kind, field):
    path = config(f"""\
  - name: billing
    {kind}:
      {field}: http://billing.example.com
      auth:
        client_credentials:
          token_url: https://idp.example.com/token
          client_id: gateway
          client_secret: {{env: IDP_SECRET}}
""")
    [(code, line, _, _)] = problems(path)
    assert (code, line) == ("auth-insecure-upstream", 5)
