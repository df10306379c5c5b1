"""The shared store: PostgreSQL through psycopg 3, for several processes and replicas.

psycopg 3 rather than asyncpg: the stores run their blocking SQL on worker threads (sql.py), the
same code for SQLite and PostgreSQL, so a blocking driver with real server-side parameters and
LISTEN/NOTIFY fits the seam as it is; asyncpg would need a second, async copy of every query.

Counters are written as increments under row locks (delta.py), approval transitions are
compare-and-set (``WHERE state = ?``), and each change of an approval is announced with
``NOTIFY`` on channel ``gateway_approvals`` so a call held on another replica wakes at once
(see ``listen``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
import psycopg.errors

from gateway.core.errors import StoreUnavailable
from gateway.core.limits import DEFAULT_RUN_IDLE_SECONDS, POSTGRES_CONNECT_TIMEOUT_SECONDS, STORE_LISTEN_RETRY_SECONDS
from gateway.store.db import Cursor, Db, DbError, DbIntegrityError, Dialect
from gateway.store.dsn import DsnScrubber, describe_dsn
from gateway.store.flow_schema import FLOW_MIGRATION
from gateway.store.migrations import Migration, migrate, statements
from gateway.store.sql import SqlStore

__all__ = ["SESSION_MIGRATIONS", "PostgresDb", "PostgresStore", "describe_dsn"]

log = logging.getLogger("gateway.store")

SESSION_MIGRATIONS = (Migration(1, "sessions, usage buckets and implicit runs", statements(
    """CREATE TABLE IF NOT EXISTS sessions (
    principal TEXT NOT NULL,
    id TEXT NOT NULL,
    started_at TEXT NOT NULL,
    calls BIGINT NOT NULL DEFAULT 0,
    calls_by_tool TEXT NOT NULL DEFAULT '{}',
    rejected BIGINT NOT NULL DEFAULT 0,
    terminated INTEGER NOT NULL DEFAULT 0,
    terminate_message TEXT,
    implicit INTEGER NOT NULL DEFAULT 0,
    client TEXT,
    PRIMARY KEY (principal, id)
)""",
    "CREATE INDEX IF NOT EXISTS sessions_started ON sessions (started_at DESC, principal, id)",
    """CREATE TABLE IF NOT EXISTS usage (
    principal TEXT NOT NULL,
    bucket BIGINT NOT NULL,
    tool TEXT NOT NULL,
    calls BIGINT NOT NULL DEFAULT 0,
    rejected BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, bucket, tool)
)""",
    """CREATE TABLE IF NOT EXISTS implicit_runs (
    principal TEXT NOT NULL,
    client TEXT NOT NULL,
    run_id TEXT NOT NULL,
    last_call DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (principal, client)
)""")), FLOW_MIGRATION)


class PostgresStore(SqlStore):
    """Sessions (and approvals, see gateway/approvals/store.py) in PostgreSQL."""

    def __init__(self, dsn: str, *, usage_windows: Mapping[str, float] | None = None,
                 idle_timeout: float = DEFAULT_RUN_IDLE_SECONDS, write_through: bool = True) -> None:
        self._dsn = dsn
        self._scrub = DsnScrubber(dsn)  # libpq quotes a DSN it cannot parse, password and all
        self._listeners: list[threading.Thread] = []
        self._stop = threading.Event()
        where = describe_dsn(dsn)
        try:
            super().__init__(lambda: PostgresDb(self._open), where, usage_windows=usage_windows,
                             idle_timeout=idle_timeout, write_through=write_through)
        except DbError as exc:  # not reachable at start: say which database, never the password
            raise StoreUnavailable(f"cannot connect to {where}: {self._scrub(str(exc))}") from None

    def _open(self) -> psycopg.Connection[Any]:
        """A new connection; a failure is a ``DbError`` whose text (and chain: none) holds no secret of the DSN."""
        try:
            return psycopg.connect(self._dsn, autocommit=True, connect_timeout=POSTGRES_CONNECT_TIMEOUT_SECONDS,
                                   application_name="agent-policy-gateway")
        except psycopg.Error as exc:
            message = self._scrub(str(exc)) or type(exc).__name__
        raise DbError(message)  # outside the handler: no __context__ carries libpq's own text

    def _migrate(self, db: Db) -> None:
        migrate(db, "sessions", SESSION_MIGRATIONS, self.where)

    def listen(self, channel: str, wake: Callable[[str], None]) -> bool:
        """LISTEN on ``channel`` on a connection of its own, on a thread; ``wake(payload)`` per NOTIFY."""
        thread = threading.Thread(target=self._listen, args=(channel, wake), name=f"gateway-listen-{channel}",
                                  daemon=True)
        self._listeners.append(thread)
        thread.start()
        return True

    def _listen(self, channel: str, wake: Callable[[str], None]) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._dsn, autocommit=True,
                                     connect_timeout=POSTGRES_CONNECT_TIMEOUT_SECONDS) as conn:
                    conn.execute(f"LISTEN {channel}")
                    wake("")  # (re)connected: anything may have changed meanwhile, every waiter looks again
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=STORE_LISTEN_RETRY_SECONDS):
                            wake(note.payload)
            except psycopg.Error as exc:
                log.warning("listening for %s failed, retrying: %s", channel, self._scrub(str(exc)))
                self._stop.wait(STORE_LISTEN_RETRY_SECONDS)

    def close(self) -> None:
        """Stop listening, then finish writes and close (see ``SqlStore.close``)."""
        self._stop.set()
        for thread in self._listeners:
            thread.join(timeout=2 * STORE_LISTEN_RETRY_SECONDS)
        super().close()


@functools.lru_cache(maxsize=512)
def _postgres_sql(sql: str) -> str:
    """``?`` placeholders as ``%s``, and SQLite's ``instr`` as ``strpos`` (the stores' SQL has no ``%``)."""
    return sql.replace("?", "%s").replace("instr(", "strpos(")


class PostgresDb:
    """A psycopg 3 connection in autocommit mode (transactions are explicit), re-opened once it broke;
    psycopg's errors come out as ``DbError`` / ``DbIntegrityError``.

    A connection the server dropped (a restart, a failover, an idle timeout) fails the statement that
    found it broken, which callers see as a database error; the next statement opens a new one.
    """

    dialect: Dialect = "postgres"

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self._connect = connect
        with _mapped():
            self.raw = connect()

    def _live(self) -> psycopg.Connection[Any]:
        if self.raw.closed or self.raw.broken:
            self.raw = self._connect()
        return self.raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement."""
        with _mapped():
            return self._live().execute(_postgres_sql(sql), tuple(params))  # type: ignore[arg-type]  # built SQL

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement per row."""
        with _mapped(), self._live().cursor() as cursor:
            cursor.executemany(_postgres_sql(sql), [tuple(r) for r in rows])  # type: ignore[arg-type]

    def begin(self) -> None:
        """BEGIN (row locks are taken by the statements themselves)."""
        with _mapped():
            self._live().execute("BEGIN")

    def commit(self) -> None:
        """COMMIT."""
        with _mapped():
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        """ROLLBACK if a transaction is open (nothing to do on a broken connection: the server dropped it)."""
        with _mapped():
            if not (self.raw.closed or self.raw.broken) and \
                    self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.raw.execute("ROLLBACK")

    def for_update(self, select: str) -> str:
        """The select, locking the rows it reads until the transaction ends."""
        return f"{select} FOR UPDATE"

    def close(self) -> None:
        """Close."""
        self.raw.close()


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """psycopg's errors as the stores' (gateway/store/db.py)."""
    try:
        yield
    except psycopg.errors.IntegrityError as exc:
        raise DbIntegrityError(str(exc)) from exc
    except psycopg.Error as exc:
        raise DbError(str(exc).strip() or type(exc).__name__) from exc
