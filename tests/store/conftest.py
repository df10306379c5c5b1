"""Fixtures for the store tests: a throwaway PostgreSQL cluster (one per test session), a database per test, and
``open_store``, which opens stores on one database (a SQLite file or that PostgreSQL database) for each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_cluster import Cluster, running_cluster
from store_support import Opener

from gateway.store.postgres import PostgresStore
from gateway.store.sql import SqlStore
from gateway.store.sqlite import SqliteStore


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster in a temp dir on a free loopback port, for the whole test session."""
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def postgres_dsn(pg_cluster: Cluster) -> str:
    """A fresh database of its own for this test."""
    return pg_cluster.new_database()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each store backend in turn."""
    return str(request.param)


@pytest.fixture
def open_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Opener]:
    """Opens stores on one database, as separate processes would (SQLite: write-through, as a shared file is);
    closes them after the test. ``opener.dsn`` / ``opener.path`` name the database."""
    opened: list[SqlStore] = []
    dsn = request.getfixturevalue("postgres_dsn") if backend == "postgres" else None

    def opener(**options: Any) -> SqlStore:
        options.setdefault("write_through", True)
        store: SqlStore = PostgresStore(dsn, **options) if dsn is not None \
            else SqliteStore(tmp_path / "g.sqlite3", **options)
        opened.append(store)
        return store

    opener.dsn = dsn  # type: ignore[attr-defined]
    opener.path = tmp_path / "g.sqlite3"  # type: ignore[attr-defined]
    yield opener
    for store in opened:
        store.close()
