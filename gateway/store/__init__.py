"""Durable state: sessions (and approvals), in SQLite by default or in PostgreSQL (docs/store.md)."""

from __future__ import annotations

from gateway.store.base import SessionStore
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SessionState, SqliteStore

__all__ = ["PostgresStore", "SessionState", "SessionStore", "SqliteStore"]
