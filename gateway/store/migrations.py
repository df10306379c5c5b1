"""Versioned schema migrations, run when a store opens, for each component (sessions, approvals) apart.

Table ``schema_versions`` holds one row per component: the last migration applied. Opening a store
applies the missing ones in one transaction, under a lock (SQLite's write lock, PostgreSQL's advisory
lock), so two processes starting at once migrate once. A database whose version is newer than the
code knows was written by a newer gateway: opening it fails with ``StoreSchemaError`` rather than
guessing at columns it does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.core.errors import StoreSchemaError
from gateway.store.db import Db

__all__ = ["Migration", "migrate", "schema_version"]

# The key of PostgreSQL's advisory lock held while migrating (any constant; this one spells "gwschema").
_ADVISORY_KEY = 0x6777736368656D61


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of a component's schema: its version and what it does."""

    version: int
    about: str
    apply: Callable[[Db], None]


def statements(*sql: str) -> Callable[[Db], None]:
    """A migration that runs these statements in order."""

    def run(db: Db) -> None:
        for statement in sql:
            db.execute(statement)

    return run


def schema_version(db: Db, component: str) -> int:
    """The component's version in this database (0: none yet)."""
    db.execute("CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    row = db.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
    return int(row[0]) if row else 0


def migrate(db: Db, component: str, migrations: Sequence[Migration], where: str) -> int:
    """Bring ``component`` up to the last of ``migrations``; its version. Refuses a newer database."""
    known = migrations[-1].version
    db.begin()
    try:
        if db.dialect == "postgres":  # one starting process migrates; the others wait, then find it done
            db.execute("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_KEY,))
        current = schema_version(db, component)
        if current > known:
            raise StoreSchemaError(
                f"the {component} schema in {where} is version {current}, newer than this gateway knows ({known}):"
                " it was written by a newer gateway. Run that version, or restore a backup made before it.")
        for step in migrations:
            if step.version > current:
                step.apply(db)
        if known != current:
            db.execute("INSERT INTO schema_versions (component, version) VALUES (?, ?)"
                       " ON CONFLICT (component) DO UPDATE SET version = excluded.version", (component, known))
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return known
