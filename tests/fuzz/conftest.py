"""Fixtures for the fuzzers: a real gateway per test, or per module (see fuzz_support.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx2
import pytest
from fuzz_support import REQUEST_SECONDS, FuzzGateway, gateway_in_thread


@contextlib.contextmanager
def running_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    """A real gateway on loopback (each example checks its health, so the end needs no check)."""
    root = tmp_path_factory.mktemp("fuzz-gateway")
    with gateway_in_thread(root) as url, httpx2.Client(base_url=url, timeout=REQUEST_SECONDS) as client:
        yield FuzzGateway(url, root, client)


@pytest.fixture
def fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    """A gateway for one test (all its hypothesis examples): a family of inputs that poisons the
    gateway, such as a known bug's, cannot fail the next family's health checks."""
    with running_gateway(tmp_path_factory) as running:
        yield running


@pytest.fixture(scope="module")
def module_fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    """One gateway for a whole module (schemathesis makes a test per operation)."""
    with running_gateway(tmp_path_factory) as running:
        yield running

