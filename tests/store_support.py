"""What the store tests share: the type of the ``open_store`` fixture (tests/store/conftest.py) and a raw
connection to the database it opens stores on."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import psycopg

from gateway.store.sql import SqlStore

__all__ = ["Opener", "raw"]

# Opens a store on the test's database, as another process would (``**options``: the store's own).
Opener = Callable[..., SqlStore]


def raw(opener: Opener) -> Any:
    """A plain connection (autocommit) to the database ``opener`` opens stores on; close it after use."""
    dsn = opener.dsn  # type: ignore[attr-defined]
    if dsn is not None:
        return psycopg.connect(dsn, autocommit=True)
    return sqlite3.connect(opener.path, isolation_level=None)  # type: ignore[attr-defined]
