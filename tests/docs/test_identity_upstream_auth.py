"""The upstream ``auth:`` examples of docs/identity.md load as the gateway loads them: a page that shows a
field the config does not take, or a shape it refuses, fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gateway.config.upstreams import UpstreamSpec

PAGE = Path(__file__).resolve().parents[2] / "docs" / "identity.md"
_FENCE = re.compile(r"```yaml\n(.*?)```", re.S)


def upstreams_with_auth() -> list[dict[str, Any]]:
    """Every upstream entry of the page's YAML blocks whose kind has an ``auth:``."""
    found = []
    for block in _FENCE.findall(PAGE.read_text(encoding="utf-8")):
        data = yaml.safe_load(block) or {}
        for entry in data.get("upstreams") or [] if isinstance(data, dict) else []:
            if any(isinstance(entry.get(kind), dict) and "auth" in entry[kind] for kind in ("http", "openapi", "mcp")):
                found.append(entry)
    return found


def test_the_pages_upstream_auth_examples_load() -> None:
    entries = upstreams_with_auth()
    assert entries, "docs/identity.md shows no upstream auth: examples"
    grants = set()
    for entry in entries:
        spec = UpstreamSpec.model_validate(entry)
        block = getattr(spec, spec.kind)
        assert block.auth is not None
        grants.add("token_exchange" if block.auth.token_exchange else "client_credentials")
    assert grants == {"client_credentials", "token_exchange"}
