"""Config mistakes a platform engineer can make: each one positioned, with a hint, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run_cli

from gateway.config.load import check_config, load_config
from gateway.core.errors import ConfigError


def codes(path: Path) -> list[tuple[str, int, int]]:
    loaded, diagnostics = check_config(path)
    assert loaded is None
    return [(d.code, d.line, d.column) for d in diagnostics]


def test_a_clean_config_loads_with_paths_relative_to_it(config, tmp_path):
    loaded = load_config(config("upstreams: []\n"))
    assert loaded.policy_paths() == [tmp_path / "policies"]
    assert loaded.call_timeout == 30.0


def test_an_unknown_key_names_the_closest_one(config):
    path = config("listen: {host: 127.0.0.1, prot: 8080}\n")
    loaded, (d,) = check_config(path)
    assert loaded is None
    assert (d.code, d.line, d.column, d.hint) == ("unknown-key", 1, 27, "did you mean 'port'?")


def test_a_url_that_is_not_http_is_refused_with_a_hint(config):
    path = config("upstreams:\n  - name: a\n    http: {base_url: 'ftp://x'}\n")
    (d,) = check_config(path)[1]
    assert (d.code, d.line, d.hint) == ("invalid-value", 3, "write an absolute http:// or https:// URL")


def test_an_upstream_needs_exactly_one_kind(config):
    path = config("upstreams:\n  - name: a\n  - name: b\n    mcp: {command: x, url: 'http://y'}\n")
    assert codes(path) == [("invalid-value", 2, 5), ("invalid-value", 4, 10)]


def test_tools_that_need_the_client_name_kinds_it_can_be_asked(config):
    path = config("upstreams:\n  - name: a\n    mcp:\n      command: x\n"
                  "      tools_need_client: {get-roots-list: [roots], 'ask-*': [elicitation, telepathy]}\n")
    [(code, line, _)] = codes(path)
    assert (code, line) == ("invalid-value", 5)
    fine = load_config(config("upstreams:\n  - name: a\n    mcp: {command: x, tools_need_client: {'ask-*': [roots]}}"))
    assert fine.spec.upstreams[0].mcp is not None
    assert fine.spec.upstreams[0].mcp.tools_need_client == {"ask-*": ["roots"]}


def test_a_credential_written_into_the_config_is_refused(config):
    path = config("upstreams:\n  - name: a\n    http:\n      base_url: http://127.0.0.1:9\n"
                  "      headers: {Authorization: Bearer abc, X-Team: pets}\n")
    loaded, (d,) = check_config(path)
    assert loaded is None
    assert (d.code, d.line) == ("secret-literal", 5)
    assert "{env: VARIABLE}" in (d.hint or "")


def test_a_secret_whose_variable_is_not_set_is_reported_where_it_is_used(config, monkeypatch):
    monkeypatch.delenv("GW_TEST_NOT_SET", raising=False)
    path = config("approvals:\n  webhooks:\n    - url: http://127.0.0.1:9/hook\n"
                  "      secret: {env: GW_TEST_NOT_SET}\n")
    (d,) = check_config(path)[1]
    assert (d.code, d.line, d.column) == ("secret-missing", 4, 15)
    assert "GW_TEST_NOT_SET" in d.message


def test_duplicate_upstream_names_and_missing_paths(config):
    path = config("policies: [nowhere]\nupstreams:\n  - {name: a, http: {base_url: 'http://x'}}\n"
                  "  - {name: a, openapi: {spec: missing.yaml}}\n")
    assert sorted(codes(path)) == [("duplicate-upstream", 4, 12), ("not-found", 1, 12), ("not-found", 4, 31)]


def test_gateway_check_config_prints_every_problem_and_fails(config, tmp_path):
    path = config("listen: {prot: 1}\nstore: 5\n")
    out = run_cli(tmp_path, "check", "--config", str(path))
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert lines[0].startswith(f"{path}:1:10: error[unknown-key]: unknown key 'listen.prot'")
    assert lines[1:3] == ["  1 | listen: {prot: 1}", "    |          ^"]
    assert lines[3].startswith(f"{path}:2:8: error[wrong-type]: store:")
    assert lines[4:6] == ["  2 | store: 5", "    |        ^"]
    assert lines[-1] == "2 error(s)"


def test_load_config_raises_with_all_diagnostics(config):
    with pytest.raises(ConfigError) as excinfo:
        load_config(config("listen: {prot: 1}\nengine: fast\n"))
    assert [d.code for d in excinfo.value.diagnostics] == ["unknown-key", "invalid-value"]


def test_a_principal_id_that_a_tokens_binding_key_could_take_is_refused(config):
    # jwt:... is how runs, usage and approvals of a token's (issuer, subject) are keyed: an API key or the
    # anonymous principal named so would share them with that token's caller
    path = config("auth:\n  api_keys:\n    - principal: {id: 'jwt:https%3A%2F%2Fidp:alice'}\n"
                  f"      sha256: '{'0' * 64}'\n  anonymous: {{id: 'jwt:x'}}\n")
    loaded, diagnostics = check_config(path)
    assert loaded is None
    assert [(d.code, d.line, d.column) for d in diagnostics] == [
        ("reserved-principal-id", 3, 23), ("reserved-principal-id", 5, 19)]
    assert all("jwt:" in d.message and d.hint == "name the principal without the 'jwt:' prefix" for d in diagnostics)
    assert load_config(config(f"auth:\n  api_keys:\n    - principal: {{id: 'jwt'}}\n      sha256: '{'0' * 64}'\n"))
