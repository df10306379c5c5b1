"""`auth.resource_metadata`: the resource URL, the scopes and the advertised issuers, each mistake positioned."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.load import check_config
from gateway.config.protected_resource import ResourceMetadataSpec, issuer_problems

GOOD = {"resource": "https://gateway.example.com/mcp", "authorization_servers": ["https://idp.example.com"]}


@pytest.fixture
def config(tmp_path: Path):
    """``config(resource_metadata_yaml)`` writes gateway.yaml with that block under `auth:`; returns its path."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text("policy: p\nrules: [{id: r, action: allow}]\n")

    def write(block: str) -> Path:
        path = tmp_path / "gateway.yaml"
        path.write_text("auth:\n  resource_metadata:\n" + "".join(f"    {line}\n" for line in block.splitlines()))
        return path
    return write


@pytest.mark.parametrize(("resource", "says"), [
    ("http://gateway.example.com/mcp", "http is allowed only for a loopback host"),
    ("ftp://gateway.example.com/mcp", "absolute https:// URL"),
    ("/mcp", "absolute https:// URL"),
    ("https://gateway.example.com", "with its path"),
    ("https://gateway.example.com/", "with its path"),
    ("https://gateway.example.com/mcp#x", "query or a fragment"),
    ("https://gateway.example.com/mcp?tenant=a", "query or a fragment"),
    ("https://user:pw@gateway.example.com/mcp", "user name or password"),
    ('https://gateway.example.com/mcp"x', "only URL characters"),
    ("https://gateway.example.com/m cp", "only URL characters"),
    ("https://Gateway.Example.com/mcp", "normal form: 'https://gateway.example.com/mcp'"),
    ("https://gateway.example.com:443/mcp", "normal form: 'https://gateway.example.com/mcp'"),
    ("https://gateway.example.com:99999/mcp", "port"),
], ids=lambda v: v if isinstance(v, str) and v.startswith(("h", "f", "/")) else "")
def test_a_resource_that_clients_could_not_use_is_refused_at_its_line(config, resource, says):
    path = config(f"resource: '{resource}'\nauthorization_servers: [https://idp.example.com]")
    loaded, (d,) = check_config(path)
    assert loaded is None
    assert (d.code, d.line, d.column) == ("invalid-value", 3, 15)
    assert says in d.message


@pytest.mark.parametrize("resource", ["http://127.0.0.1:8080/mcp", "http://localhost:8080/mcp", "http://[::1]:9/mcp",
                                      "https://gateway.example.com/mcp", "https://gateway.example.com:8443/tools/mcp"])
def test_https_and_loopback_http_resources_are_taken(resource):
    assert ResourceMetadataSpec(resource=resource, authorization_servers=["https://idp"]).resource == resource


@pytest.mark.parametrize(("scopes", "says"), [
    ('["mcp", "a b"]', "not a scope token"),
    ("['mcp', 'a\"b']", "not a scope token"),
    ("[mcp, offline_access]", "offline_access"),
    ("[mcp, mcp]", "listed twice"),
])
def test_scopes_that_cannot_go_into_a_challenge_are_refused(config, scopes, says):
    path = config(f"resource: https://gateway.example.com/mcp\nauthorization_servers: [https://idp]\n"
                  f"scopes_supported: {scopes}")
    _, (d,) = check_config(path)
    assert (d.code, d.line) == ("invalid-value", 5)
    assert says in d.message


def test_at_least_one_authorization_server_and_no_unknown_keys(config):
    path = config("resource: https://gateway.example.com/mcp\nauthorization_servers: []\nscopes_suported: [mcp]")
    _, problems = check_config(path)
    assert sorted((d.code, d.line) for d in problems) == [("invalid-value", 4), ("unknown-key", 5)]
    assert next(d for d in problems if d.code == "unknown-key").hint == "did you mean 'scopes_supported'?"


def test_a_page_for_people_must_be_an_https_url_too(config):
    path = config("resource: https://gateway.example.com/mcp\nauthorization_servers: [https://idp]\n"
                  "resource_documentation: http://docs.example.com/gateway")
    (d,) = check_config(path)[1]
    assert (d.code, d.line) == ("invalid-value", 5)


def test_advertised_servers_must_be_configured_issuers_that_accept_the_resource():
    spec = ResourceMetadataSpec(**{**GOOD, "authorization_servers": ["https://idp.example.com", "https://other",
                                                                     "https://idp.example.com/"]})
    problems = issuer_problems(spec, {"https://idp.example.com": ["https://gateway.example.com/mcp"]})
    # a trailing slash is another issuer: issuers are compared as text (RFC 8414 section 3.3)
    assert [(path, code) for path, code, _, _ in problems] == [
        (("auth", "resource_metadata", "authorization_servers", 1), "resource-metadata-issuer"),
        (("auth", "resource_metadata", "authorization_servers", 2), "resource-metadata-issuer"),
    ]
    assert "configured: 'https://idp.example.com'" in problems[0][2]


def test_an_issuer_whose_audiences_lack_the_resource_is_refused():
    spec = ResourceMetadataSpec(**GOOD)
    (problem,) = issuer_problems(spec, {"https://idp.example.com": ["https://gateway.example.com/api"]})
    path, code, _, hint = problem
    assert (path, code) == (("auth", "resource_metadata", "resource"), "resource-not-audience")
    assert "'https://gateway.example.com/mcp'" in hint
    assert issuer_problems(spec, {"https://idp.example.com": ["https://gateway.example.com/mcp"]}) == []


def test_the_issuer_checks_are_positioned_in_the_config_file(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text("policy: p\nrules: [{id: r, action: allow}]\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "auth:\n"
        "  jwt:\n"
        "    - issuer: https://idp.example.com\n"
        "      audiences: [https://gateway.example.com/api]\n"
        "  resource_metadata:\n"
        "    resource: https://gateway.example.com/mcp\n"
        "    authorization_servers:\n"
        "      - https://idp.example.com\n"
        "      - https://login.example.com\n")
    _, problems = check_config(path)
    assert sorted((d.code, d.line, d.column) for d in problems) == [
        ("resource-metadata-issuer", 9, 9), ("resource-not-audience", 6, 15)]
    assert all(d.file == str(path.resolve()) for d in problems)


def test_an_advertised_issuers_required_scope_must_fit_in_a_challenge(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text("policy: p\nrules: [{id: r, action: allow}]\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "auth:\n"
        "  jwt:\n"
        "    - issuer: https://idp.example.com\n"
        "      audiences: [https://gateway.example.com/mcp]\n"
        "      required_scopes:\n"
        "        - mcp\n"
        "        - 'x\"y'\n"
        "        - 'a\\\\b'\n"
        "        - 'é'\n"
        "  resource_metadata:\n"
        "    resource: https://gateway.example.com/mcp\n"
        "    authorization_servers: [https://idp.example.com]\n")
    _, problems = check_config(path)
    assert [(d.code, d.line, d.column) for d in problems] == [("challenge-scope", line, 11) for line in (7, 8, 9)]
