"""Durable state: sessions (and approvals), in SQLite by default or in PostgreSQL (docs/store.md)."""

from __future__ import annotations

from gateway.store.base import SessionStore
from gateway.store.sqlite import SessionState, SqliteStore

# PostgresStore lives in gateway.store.postgres, imported only when configured (it loads the driver).
__all__ = ["SessionState", "SessionStore", "SqliteStore"]
