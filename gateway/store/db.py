"""One database connection, SQLite or PostgreSQL, behind one small interface that speaks ``?`` placeholders.

The stores write their SQL once, in the subset both databases understand (``INSERT ... ON CONFLICT``,
``excluded.``, ``RETURNING``), with ``?`` for parameters; this adapter turns it into PostgreSQL's
``%s`` style and names the few words that differ (``instr`` is ``strpos``; a write transaction is
``BEGIN IMMEDIATE`` in SQLite; a locked read is ``FOR UPDATE`` in PostgreSQL). Connections are
blocking: every store runs them on its own worker threads, never on the event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

__all__ = ["DB_ERRORS", "INTEGRITY_ERRORS", "Cursor", "Db", "DbError", "DbIntegrityError", "SqliteDb"]

Dialect = Literal["sqlite", "postgres"]


class DbError(Exception):
    """A PostgreSQL failure as the stores see it (the driver's errors are mapped where they enter,
    in gateway/store/postgres.py, so SQLite users never load the driver)."""


class DbIntegrityError(DbError):
    """A unique key already held."""


# What a failed database call raises, whichever database it is.
DB_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, DbError)
# A unique key already held (another process stored the same row first).
INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError, DbIntegrityError)


class Cursor(Protocol):
    """What a statement returns: its rows and how many rows it changed."""

    @property
    def rowcount(self) -> int:
        """Rows changed by the statement."""
        ...

    def fetchone(self) -> Any:
        """The next row, or None."""
        ...

    def fetchall(self) -> list[Any]:
        """Every remaining row."""
        ...


class Db(Protocol):
    """One blocking connection (use from one thread at a time)."""

    dialect: Dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement (``?`` placeholders)."""
        ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        ...

    def begin(self) -> None:
        """Start a write transaction (taking the write lock at once in SQLite)."""
        ...

    def commit(self) -> None:
        """Commit the transaction."""
        ...

    def rollback(self) -> None:
        """Roll back the transaction, if one is open."""
        ...

    def for_update(self, select: str) -> str:
        """``select`` with the row lock that makes a read-modify-write atomic (PostgreSQL; SQLite's
        write transaction already holds the whole database)."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


class SqliteDb:
    """A sqlite3 connection in autocommit mode (transactions are explicit)."""

    dialect: Dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.raw = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement."""
        return self.raw.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement per row."""
        self.raw.executemany(sql, rows)

    def begin(self) -> None:
        """BEGIN IMMEDIATE: the write lock now, so a read-modify-write is never overtaken."""
        self.raw.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        """COMMIT."""
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        """ROLLBACK if a transaction is open."""
        if self.raw.in_transaction:
            self.raw.execute("ROLLBACK")

    def for_update(self, select: str) -> str:
        """SQLite locks the whole file for the transaction: the select as it is."""
        return select

    def close(self) -> None:
        """Close."""
        self.raw.close()
