"""Approval requests beside the sessions (SQLite or PostgreSQL); every state change is compare-and-set.

The lock serialises this process's use of the connection; the ``WHERE state = ?`` guard on each
transition is what makes "approved → executing" happen once even if two callers (or two gateway
processes, or replicas on one PostgreSQL) race for it. The methods block: the service calls them
through the store's ``run``, on its worker thread, never on the event loop. A database that stays
locked past the busy timeout (or a server that cannot be reached) raises ``StoreUnavailable``.
On PostgreSQL each change is announced (``NOTIFY gateway_approvals``) so held calls on every
replica wake at once; SQLite's waiters poll.

A request holds its key — (principal, upstream, tool, call id, digest); for a call that came without a
call id (principal, upstream, run, tool, digest), the run being "" for one bound across the principal's
implicit runs (``Binding.PRINCIPAL``: the ``session`` column is the run that binds it, the data keeps the
run it came in) — while it is not *retired*; the unique indexes cover only those
rows, so a request whose approval lapsed (or whose outcome was given) leaves room for a new one.
When it was retired is kept (``retired_ts``): a run-bound retry that came in before then is still its own.
Who may decide a request is kept as rows of ``approval_audience`` ("group:NAME", "user:ID", "*"),
so a page of the requests an approver may see is one indexed query.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from gateway.approvals.model import Approval, ApprovalState
from gateway.approvals.schema import COLUMNS, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS, add_audience, dump, load
from gateway.core.errors import StoreUnavailable
from gateway.store.db import DB_ERRORS, INTEGRITY_ERRORS, Db
from gateway.store.migrations import migrate

__all__ = ["CHANNEL", "ApprovalBackend", "ApprovalStore", "ListFilter"]

# The PostgreSQL notification channel on which every change of an approval is announced (payload: its id).
CHANNEL = "gateway_approvals"


class ApprovalBackend(Protocol):
    """What approvals need from the store they live in (SqliteStore, PostgresStore)."""

    instance_id: str
    where: str

    @property
    def connection(self) -> Db:
        """The connection approval work uses (hold ``lock``)."""
        ...

    @property
    def lock(self) -> threading.Lock:
        """Guards ``connection``."""
        ...

    def run(self, work: Callable[..., R], *args: Any) -> Awaitable[R]:
        """Run blocking work on the store's worker thread."""
        ...

    def listen(self, channel: str, wake: Callable[[str], None]) -> bool:
        """Have ``wake(payload)`` called for each notification; False if the database cannot push them."""
        ...

P = ParamSpec("P")
R = TypeVar("R")


def _guarded(method: Callable[P, R]) -> Callable[P, R]:
    """Map SQLite's failures (a file locked past the busy timeout, a broken file) to ``StoreUnavailable``."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except DB_ERRORS as exc:
            raise StoreUnavailable(f"the approvals database is unavailable ({exc})") from exc

    return wrapper


@dataclass(frozen=True, slots=True)
class ListFilter:
    """Which requests a listing shows; None means any."""

    state: str | None = None
    tool: str | None = None
    principal: str | None = None
    text: str | None = None  # found anywhere in the request (tool, arguments, messages, votes)
    audience: tuple[str, ...] | None = None  # only requests one of these may decide (see model.seen_as)

    def where(self) -> tuple[str, tuple[Any, ...]]:
        """The SQL condition and its parameters."""
        terms: list[str] = []
        params: list[Any] = []
        for column, value in (("state", self.state), ("tool", self.tool), ("principal", self.principal)):
            if value is not None:
                terms.append(f"{column} = ?")
                params.append(value)
        if self.text:
            terms.append("instr(lower(data), lower(?)) > 0")
            params.append(self.text)
        if self.audience is not None:
            marks = ", ".join("?" * len(self.audience))
            terms.append(f"id IN (SELECT approval_id FROM approval_audience WHERE entry IN ({marks}))")
            params.extend(self.audience)
        return ("WHERE " + " AND ".join(terms) if terms else ""), tuple(params)


class ApprovalStore:
    """CRUD and guarded transitions for approval requests (blocking: call through ``run``)."""

    def __init__(self, store: ApprovalBackend) -> None:
        self._db = store.connection
        self._lock = store.lock
        self._store = store
        self.run = store.run
        self.instance_id = store.instance_id
        with self._lock:
            migrations = SQLITE_MIGRATIONS if self._db.dialect == "sqlite" else POSTGRES_MIGRATIONS
            migrate(self._db, "approvals", migrations, store.where)

    def listen(self, wake: Callable[[str], None]) -> bool:
        """Have ``wake(approval id)`` called (from a thread) whenever any process changes a request;
        False if the database cannot push changes (then waiters poll)."""
        return self._store.listen(CHANNEL, wake)

    def _changed(self, approval_id: str) -> None:
        """Announce a change of the request to every process (PostgreSQL; SQLite's waiters poll)."""
        if self._db.dialect == "postgres":
            self._db.execute("SELECT pg_notify(?, ?)", (CHANNEL, approval_id))

    def _add_audience(self, approval: Approval) -> None:
        add_audience(self._db, approval)

    @_guarded
    def insert(self, approval: Approval) -> Approval:
        """Store a new request; if a live one holds the same key, return that one instead."""
        with self._lock:
            found = self._holder(approval)
            if found is not None:
                return found
            self._db.begin()
            try:
                self._db.execute(
                    "INSERT INTO approvals (id, call_id, principal, digest, state, expires_ts, created_at, data, tool,"
                    " session, by_run, upstream) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (approval.id, approval.call_id, approval.principal.key, approval.digest, str(approval.state),
                     approval.expires_ts, approval.created_at, dump(approval), approval.tool,
                     approval.run_key, int(approval.by_run), approval.upstream))
                self._add_audience(approval)
                self._db.commit()
            except INTEGRITY_ERRORS:
                # Another gateway process on this database stored the same key first: that request is the one.
                self._db.rollback()
                found = self._holder(approval)
                if found is None:
                    raise
                return found
            except BaseException:
                self._db.rollback()
                raise
        return approval

    def _holder(self, approval: Approval) -> Approval | None:
        """The live request holding ``approval``'s key, if any."""
        if approval.by_run:
            return self._find_by_run(approval.principal.key, approval.upstream, approval.run_key, approval.tool,
                                     approval.digest)
        return self._find(approval.principal.key, approval.upstream, approval.tool, approval.call_id, approval.digest)

    def _find_by_run(self, principal: str, upstream: str, run: str, tool: str, digest: str) -> Approval | None:
        row = self._db.execute(
            f"SELECT {COLUMNS} FROM approvals WHERE principal = ? AND upstream = ? AND session = ? AND tool = ?"
            " AND digest = ? AND by_run = 1 AND retired = 0", (principal, upstream, run, tool, digest)).fetchone()
        return load(row) if row else None

    @_guarded
    def find_by_run(self, principal: str, upstream: str, run: str, tool: str, digest: str,
                    received_ts: float | None = None) -> Approval | None:
        """The request for a call without a call id: this principal's run ("": any implicit run), the upstream's
        ``tool`` and the arguments.

        The live one; else, for a call the gateway took in at ``received_ts``, the one that let go of its
        key after that (a retry sent together with the one that was given the outcome is still its retry).
        """
        with self._lock:
            found = self._find_by_run(principal, upstream, run, tool, digest)
            if found is not None or received_ts is None:
                return found
            row = self._db.execute(
                f"SELECT {COLUMNS} FROM approvals WHERE principal = ? AND session = ? AND tool = ? AND digest = ?"
                " AND upstream = ? AND by_run = 1 AND retired = 1 AND retired_ts >= ? ORDER BY retired_ts DESC LIMIT 1",
                (principal, run, tool, digest, upstream, received_ts)).fetchone()
            return load(row) if row else None

    @_guarded
    def retire(self, approval_id: str) -> None:
        """Free the request's key (its outcome was given): the next identical call is a new request."""
        with self._lock:
            self._db.execute("UPDATE approvals SET retired = 1, retired_ts = COALESCE(retired_ts, ?) WHERE id = ?",
                             (time.time(), approval_id))

    def _find(self, principal: str, upstream: str, tool: str, call_id: str, digest: str) -> Approval | None:
        row = self._db.execute(
            f"SELECT {COLUMNS} FROM approvals WHERE principal = ? AND upstream = ? AND tool = ? AND call_id = ?"
            " AND digest = ? AND retired = 0", (principal, upstream, tool, call_id, digest)).fetchone()
        return load(row) if row else None

    @_guarded
    def find(self, principal: str, upstream: str, tool: str, call_id: str, digest: str) -> Approval | None:
        """The live request for this principal's call of the upstream's ``tool`` with this id and these arguments."""
        with self._lock:
            return self._find(principal, upstream, tool, call_id, digest)

    @_guarded
    def for_call(self, principal: str, call_id: str, tool: str) -> list[Approval]:
        """Every live request for this principal's call id to ``tool`` (one per set of arguments), newest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {COLUMNS} FROM approvals WHERE principal = ? AND call_id = ? AND tool = ? AND retired = 0"
                " ORDER BY created_at DESC", (principal, call_id, tool)).fetchall()
        return [load(r) for r in rows]

    @_guarded
    def in_state(self, state: ApprovalState) -> list[Approval]:
        """Every request in one state."""
        with self._lock:
            rows = self._db.execute(f"SELECT {COLUMNS} FROM approvals WHERE state = ?", (str(state),)).fetchall()
        return [load(r) for r in rows]

    @_guarded
    def get(self, approval_id: str) -> Approval | None:
        """One request by id."""
        with self._lock:
            row = self._db.execute(f"SELECT {COLUMNS} FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return load(row) if row else None

    @_guarded
    def list_requests(self, state: str | None = None, limit: int = 200, offset: int = 0,
                      which: ListFilter | None = None) -> tuple[list[Approval], int]:
        """One page of requests, newest first, filtered; and how many match in all."""
        which = which or ListFilter(state=state)
        where, params = which.where()
        with self._lock:
            total = self._db.execute(f"SELECT COUNT(*) FROM approvals {where}", params).fetchone()[0]
            rows = self._db.execute(f"SELECT {COLUMNS} FROM approvals {where} ORDER BY created_at DESC, id"
                                    " LIMIT ? OFFSET ?", (*params, limit, offset)).fetchall()
        return [load(r) for r in rows], int(total)

    @_guarded
    def due(self, now_ts: float) -> list[Approval]:
        """Pending requests whose time is up."""
        with self._lock:
            rows = self._db.execute(f"SELECT {COLUMNS} FROM approvals WHERE state = ? AND expires_ts <= ?",
                                    (str(ApprovalState.PENDING), now_ts)).fetchall()
        return [load(r) for r in rows]

    @_guarded
    def abandoned(self, now_ts: float) -> list[Approval]:
        """Executing requests whose claim's lease ran out: the process executing them is gone."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {COLUMNS} FROM approvals WHERE state = ? AND (lease_ts IS NULL OR lease_ts < ?)",
                (str(ApprovalState.EXECUTING), now_ts)).fetchall()
        return [load(r) for r in rows]

    @_guarded
    def transition(self, approval: Approval, expected: ApprovalState, owner: str | None = None) -> bool:
        """Save ``approval`` only if its stored state is still ``expected`` (and, given ``owner``, the claim
        is still that process's); False if someone else won."""
        guard, params = ("AND owner = ?", (owner,)) if owner is not None else ("", ())
        with self._lock:
            cursor = self._db.execute(
                f"UPDATE approvals SET state = ?, data = ?, retired = ?, owner = ?, lease_ts = ?,"
                f" retired_ts = CASE WHEN ? = 1 THEN COALESCE(retired_ts, ?) END"
                f" WHERE id = ? AND state = ? {guard}",
                (str(approval.state), dump(approval), int(approval.retired), approval.owner, approval.lease_ts,
                 int(approval.retired), time.time(), approval.id, str(expected), *params))
            if cursor.rowcount != 1:
                return False
            self._changed(approval.id)
            return True

    @_guarded
    def renew(self, approval_id: str, owner: str, lease_ts: float) -> bool:
        """Extend this process's claim on an executing request; False if the claim is no longer its own."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE approvals SET lease_ts = ? WHERE id = ? AND state = ? AND owner = ?",
                (lease_ts, approval_id, str(ApprovalState.EXECUTING), owner))
            return cursor.rowcount == 1

    @_guarded
    def interrupt(self, approval: Approval, now_ts: float) -> bool:
        """Save ``approval`` (marked interrupted) only if it is still executing under a lease that ran out."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE approvals SET state = ?, data = ?, owner = NULL, lease_ts = NULL"
                " WHERE id = ? AND state = ? AND (lease_ts IS NULL OR lease_ts < ?)",
                (str(approval.state), dump(approval), approval.id, str(ApprovalState.EXECUTING), now_ts))
            if cursor.rowcount != 1:
                return False
            self._changed(approval.id)
            return True
