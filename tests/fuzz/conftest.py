"""Fixtures for the fuzzers: one real gateway per test module (see fuzz_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from fuzz_support import KEYS, REQUEST_SECONDS, TOOL_NAMES, FuzzGateway, gateway_in_thread


@pytest.fixture(scope="module")
def fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    """A real gateway on loopback for one test module, checked healthy at the end."""
    root = tmp_path_factory.mktemp("fuzz-gateway")
    with gateway_in_thread(root) as url, httpx2.Client(base_url=url, timeout=REQUEST_SECONDS) as client:
        running = FuzzGateway(url, root, client)
        yield running
        running.assert_healthy()


@pytest.fixture(scope="session")
def fuzz_keys() -> dict[str, str]:
    """The fuzz gateway's API keys by principal."""
    return dict(KEYS)


@pytest.fixture(scope="session")
def fuzz_tools() -> list[str]:
    """The exposed names of the fuzz gateway's tools."""
    return list(TOOL_NAMES)
