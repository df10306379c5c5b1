"""Durable state: sessions (and approvals), SQLite by default."""

from __future__ import annotations

from gateway.store.sqlite import SessionState, SqliteStore

__all__ = ["SessionState", "SqliteStore"]
