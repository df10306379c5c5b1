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
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, Protocol, TypeVar

from gateway.approvals.model import Approval, ApprovalState, Requirement, Vote, json_safe
from gateway.errors import StoreUnavailable
from gateway.limits import DEFAULT_APPROVAL_VALID_SECONDS
from gateway.policy.call import Principal
from gateway.store.db import DB_ERRORS, INTEGRITY_ERRORS, Db
from gateway.store.migrations import Migration, migrate, statements

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

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL,
    expires_ts REAL NOT NULL,
    created_at TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS approval_audience (
    approval_id TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (approval_id, entry)
);
CREATE INDEX IF NOT EXISTS approval_audience_entry ON approval_audience (entry, approval_id);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, expires_ts);
"""

# Columns added after the first release; an older file gets them (and its rows filled in) on open.
_ADDED_COLUMNS = {
    "tool": "TEXT NOT NULL DEFAULT ''",
    "retired": "INTEGER NOT NULL DEFAULT 0",
    "owner": "TEXT",
    "lease_ts": "REAL",
    "session": "TEXT NOT NULL DEFAULT ''",
    "by_run": "INTEGER NOT NULL DEFAULT 0",
}

# The binding: one live request per principal, exposed tool, call id and arguments. (The first
# release's index left the tool out, so one approval could release a call to another tool.)
_KEY_INDEX = (
    "DROP INDEX IF EXISTS approvals_call",
    "CREATE UNIQUE INDEX IF NOT EXISTS approvals_key ON approvals (principal, tool, call_id, digest)"
    " WHERE retired = 0",
    "CREATE INDEX IF NOT EXISTS approvals_created ON approvals (created_at DESC, id)",
    # A call without a call id is bound by its run instead: one live request per principal, run, tool
    # and arguments, so concurrent retries of it can never make a second request.
    "CREATE UNIQUE INDEX IF NOT EXISTS approvals_run_key ON approvals (principal, session, tool, digest)"
    " WHERE retired = 0 AND by_run = 1",
)

_COLUMNS = "data, owner, lease_ts, retired"

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


def _dump(a: Approval) -> str:
    data = a.to_dict()
    data["principal"]["claims"] = a.principal.claims
    data["expires_ts"] = a.expires_ts
    data["decided_ts"] = a.decided_ts
    data["result"] = a.result
    # Strict JSON, so whatever reads it back (the API, the page, the CLI) can always show it.
    return json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False)


def _load(row: tuple[Any, ...]) -> Approval:
    text, owner, lease_ts, retired = row
    # json_safe: rows written before strict JSON may hold NaN, which no JSON response can carry.
    d: dict[str, Any] = json_safe(json.loads(text))
    p = d["principal"]
    return Approval(
        id=d["id"], call_id=d["call_id"], digest=d["args_digest"],
        principal=Principal(p["id"], tuple(p["groups"]), p.get("claims") or {}), session_id=d["session"],
        tool=d["tool"], upstream=d.get("upstream", ""), original_args=d["original_args"], final_args=d["final_args"],
        requirements=[Requirement(r["rule"], r["message"], r["approvers"], r["satisfied_by"], r.get("via", "page"))
                      for r in d["requirements"]],
        created_at=d["created_at"], expires_at=d["expires_at"], expires_ts=d["expires_ts"],
        on_timeout=d["on_timeout"], state=ApprovalState(d["state"]),
        votes=[Vote(v["approver"], v["groups"], v["approve"], v["comment"], v["at"], v.get("rules", []))
               for v in d["votes"]],
        result=d.get("result"), decided_at=d.get("decided_at"),
        valid_for=float(d.get("valid_for_seconds", DEFAULT_APPROVAL_VALID_SECONDS)),
        decided_ts=d.get("decided_ts", _timestamp(d.get("decided_at"))),
        owner=owner, lease_ts=lease_ts, retired=bool(retired),
        by_run=d.get("bound_by") in ("run", "principal"), across_runs=d.get("bound_by") == "principal",
        executed_at=d.get("executed_at"),
    )


def _timestamp(stamp: str | None) -> float | None:
    """A stored RFC 3339 time as a UNIX time (rows from before ``decided_ts`` was kept)."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


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
        _add_audience(self._db, approval)

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
                    (approval.id, approval.call_id, approval.principal.id, approval.digest, str(approval.state),
                     approval.expires_ts, approval.created_at, _dump(approval), approval.tool,
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
            return self._find_by_run(approval.principal.id, approval.upstream, approval.run_key, approval.tool,
                                     approval.digest)
        return self._find(approval.principal.id, approval.upstream, approval.tool, approval.call_id, approval.digest)

    def _find_by_run(self, principal: str, upstream: str, run: str, tool: str, digest: str) -> Approval | None:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM approvals WHERE principal = ? AND upstream = ? AND session = ? AND tool = ?"
            " AND digest = ? AND by_run = 1 AND retired = 0", (principal, upstream, run, tool, digest)).fetchone()
        return _load(row) if row else None

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
                f"SELECT {_COLUMNS} FROM approvals WHERE principal = ? AND session = ? AND tool = ? AND digest = ?"
                " AND upstream = ? AND by_run = 1 AND retired = 1 AND retired_ts >= ? ORDER BY retired_ts DESC LIMIT 1",
                (principal, run, tool, digest, upstream, received_ts)).fetchone()
            return _load(row) if row else None

    @_guarded
    def retire(self, approval_id: str) -> None:
        """Free the request's key (its outcome was given): the next identical call is a new request."""
        with self._lock:
            self._db.execute("UPDATE approvals SET retired = 1, retired_ts = COALESCE(retired_ts, ?) WHERE id = ?",
                             (time.time(), approval_id))

    def _find(self, principal: str, upstream: str, tool: str, call_id: str, digest: str) -> Approval | None:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM approvals WHERE principal = ? AND upstream = ? AND tool = ? AND call_id = ?"
            " AND digest = ? AND retired = 0", (principal, upstream, tool, call_id, digest)).fetchone()
        return _load(row) if row else None

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
                f"SELECT {_COLUMNS} FROM approvals WHERE principal = ? AND call_id = ? AND tool = ? AND retired = 0"
                " ORDER BY created_at DESC", (principal, call_id, tool)).fetchall()
        return [_load(r) for r in rows]

    @_guarded
    def in_state(self, state: ApprovalState) -> list[Approval]:
        """Every request in one state."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE state = ?", (str(state),)).fetchall()
        return [_load(r) for r in rows]

    @_guarded
    def get(self, approval_id: str) -> Approval | None:
        """One request by id."""
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return _load(row) if row else None

    @_guarded
    def list_requests(self, state: str | None = None, limit: int = 200, offset: int = 0,
                      which: ListFilter | None = None) -> tuple[list[Approval], int]:
        """One page of requests, newest first, filtered; and how many match in all."""
        which = which or ListFilter(state=state)
        where, params = which.where()
        with self._lock:
            total = self._db.execute(f"SELECT COUNT(*) FROM approvals {where}", params).fetchone()[0]
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM approvals {where} ORDER BY created_at DESC, id"
                                    " LIMIT ? OFFSET ?", (*params, limit, offset)).fetchall()
        return [_load(r) for r in rows], int(total)

    @_guarded
    def due(self, now_ts: float) -> list[Approval]:
        """Pending requests whose time is up."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE state = ? AND expires_ts <= ?",
                                    (str(ApprovalState.PENDING), now_ts)).fetchall()
        return [_load(r) for r in rows]

    @_guarded
    def abandoned(self, now_ts: float) -> list[Approval]:
        """Executing requests whose claim's lease ran out: the process executing them is gone."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM approvals WHERE state = ? AND (lease_ts IS NULL OR lease_ts < ?)",
                (str(ApprovalState.EXECUTING), now_ts)).fetchall()
        return [_load(r) for r in rows]

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
                (str(approval.state), _dump(approval), int(approval.retired), approval.owner, approval.lease_ts,
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
                (str(approval.state), _dump(approval), approval.id, str(ApprovalState.EXECUTING), now_ts))
            if cursor.rowcount != 1:
                return False
            self._changed(approval.id)
            return True


def _add_audience(db: Db, approval: Approval) -> None:
    db.executemany("INSERT INTO approval_audience (approval_id, entry) VALUES (?, ?) ON CONFLICT DO NOTHING",
                   [(approval.id, entry) for entry in approval.audience()])


def _adopt_sqlite(db: Db) -> None:
    """SQLite version 1: today's tables, bringing a file from before versioned migrations up to them."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    have = {row[1] for row in db.execute("PRAGMA table_info(approvals)").fetchall()}
    for column, kind in _ADDED_COLUMNS.items():
        if column not in have:
            db.execute(f"ALTER TABLE approvals ADD COLUMN {column} {kind}")
    if "session" not in have:
        for approval_id, text in db.execute("SELECT id, data FROM approvals").fetchall():
            db.execute("UPDATE approvals SET session = ? WHERE id = ?",
                       (_load((text, None, None, 0)).session_id, approval_id))
    if "tool" not in have:
        for approval_id, text in db.execute("SELECT id, data FROM approvals").fetchall():
            approval = _load((text, None, None, 0))
            db.execute("UPDATE approvals SET tool = ? WHERE id = ?", (approval.tool, approval_id))
            _add_audience(db, approval)
    for statement in _KEY_INDEX:
        db.execute(statement)


# When a request let go of its key, and the index that finds a run-bound one that did so after a call came in.
_RETIRED_AT = (
    "CREATE INDEX IF NOT EXISTS approvals_run_retired ON approvals (principal, session, tool, digest, retired_ts)"
    " WHERE by_run = 1 AND retired = 1",
)

# Version 3: the upstream joins both keys, so an agent-run tool's approval (upstream "client") never releases
# a gateway tool of the same name. Rows from before have upstream "": no call finds them by key any more (a
# retry asks afresh, failing closed); they are still listed, decided and given their outcome by id.
_UPSTREAM_KEYS = (
    "DROP INDEX IF EXISTS approvals_key",
    "DROP INDEX IF EXISTS approvals_run_key",
    "CREATE UNIQUE INDEX IF NOT EXISTS approvals_key ON approvals (principal, upstream, tool, call_id, digest)"
    " WHERE retired = 0",
    "CREATE UNIQUE INDEX IF NOT EXISTS approvals_run_key ON approvals (principal, upstream, session, tool, digest)"
    " WHERE retired = 0 AND by_run = 1",
)

SQLITE_MIGRATIONS = (
    Migration(1, "approval requests and their audience", _adopt_sqlite),
    Migration(2, "when a request let go of its key", statements(
        "ALTER TABLE approvals ADD COLUMN retired_ts REAL", *_RETIRED_AT)),
    Migration(3, "the upstream joins the keys", statements(
        "ALTER TABLE approvals ADD COLUMN upstream TEXT NOT NULL DEFAULT ''", *_UPSTREAM_KEYS)),
)

POSTGRES_MIGRATIONS = (Migration(1, "approval requests and their audience", statements(
    """CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL,
    expires_ts DOUBLE PRECISION NOT NULL,
    created_at TEXT NOT NULL,
    data TEXT NOT NULL,
    tool TEXT NOT NULL DEFAULT '',
    retired INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_ts DOUBLE PRECISION,
    session TEXT NOT NULL DEFAULT '',
    by_run INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS approval_audience (
    approval_id TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (approval_id, entry)
)""",
    "CREATE INDEX IF NOT EXISTS approval_audience_entry ON approval_audience (entry, approval_id)",
    "CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, expires_ts)",
    *_KEY_INDEX[1:],
)), Migration(2, "when a request let go of its key", statements(
    "ALTER TABLE approvals ADD COLUMN IF NOT EXISTS retired_ts DOUBLE PRECISION", *_RETIRED_AT)),
    Migration(3, "the upstream joins the keys", statements(
    "ALTER TABLE approvals ADD COLUMN IF NOT EXISTS upstream TEXT NOT NULL DEFAULT ''", *_UPSTREAM_KEYS)))
