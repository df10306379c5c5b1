"""``child_environment``: the rules a launched process's environment is built by (the end-to-end proof,
through a real gateway and real launched processes, is tests/upstreams/test_launch_env.py)."""

from __future__ import annotations

import sys

import pytest

from gateway.upstreams.environment import BASE_NAMES, child_environment

GATEWAY_ENV = {
    "PATH": "/usr/bin", "HOME": "/home/gw", "LC_ALL": "C.UTF-8", "TZ": "UTC",
    "DATABASE_PASSWORD": "hunter2", "OPENAI_API_KEY": "sk-live", "AWS_SECRET_ACCESS_KEY": "aws",
    "OTEL_ENDPOINT": "http://otel", "OTEL_SERVICE": "notes", "OTELX": "not-a-prefix-match",
    "SHELL": "() { :; }; echo pwned",
}


@pytest.mark.skipif(sys.platform == "win32", reason="the POSIX base")
def test_only_the_base_the_named_and_the_explicit_get_through() -> None:
    env = child_environment({"NOTES_DB": "/data/notes.db", "TZ": "Europe/Paris"}, ["OPENAI_API_KEY", "OTEL_*"],
                            GATEWAY_ENV)
    assert env == {"PATH": "/usr/bin", "HOME": "/home/gw", "LC_ALL": "C.UTF-8", "TZ": "Europe/Paris",
                   "OPENAI_API_KEY": "sk-live", "OTEL_ENDPOINT": "http://otel", "OTEL_SERVICE": "notes",
                   "NOTES_DB": "/data/notes.db"}


def test_nothing_passed_through_means_no_secret() -> None:
    env = child_environment({}, [], GATEWAY_ENV)
    assert not {"DATABASE_PASSWORD", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert "SHELL" not in env  # an exported shell function is code, not configuration
    assert set(env) <= {name for name in GATEWAY_ENV if any(
        name == base or (base.endswith("*") and name.startswith(base[:-1])) for base in BASE_NAMES)}


def test_the_sdk_stdio_defaults_are_all_in_the_base() -> None:
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

    assert set(DEFAULT_INHERITED_ENV_VARS) <= set(BASE_NAMES)
