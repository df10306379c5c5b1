"""Fixtures for the store tests: a throwaway PostgreSQL cluster (one per test session), a database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres_cluster import Cluster, running_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster in a temp dir on a free loopback port, for the whole test session."""
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def postgres_dsn(pg_cluster: Cluster) -> str:
    """A fresh database of its own for this test."""
    return pg_cluster.new_database()
