"""How approval requests are stored: the tables, their versioned migrations, and a row as an ``Approval``.

Both stores hold the same tables (``approvals``, and ``approval_audience``: who may decide each request,
as "group:NAME", "user:ID" or "*" rows). The columns beside ``data`` (the request as strict JSON) are what
the keys and listings query: principal, upstream, tool, call id, digest, the binding run (``session``:
"" for a request bound across the principal's implicit runs), state, lease and retirement.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.approvals.model import Approval, ApprovalState, Edit, Requirement, Vote, json_safe
from gateway.core.clock import parse_rfc3339
from gateway.core.limits import DEFAULT_APPROVAL_VALID_SECONDS
from gateway.policy.call import Principal
from gateway.store.db import Db
from gateway.store.migrations import Migration, statements

__all__ = ["COLUMNS", "POSTGRES_MIGRATIONS", "SQLITE_MIGRATIONS", "add_audience", "dump", "load"]

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

COLUMNS = "data, owner, lease_ts, retired"


def dump(a: Approval) -> str:
    data = a.to_dict()
    data["principal"]["claims"] = a.principal.claims
    data["expires_ts"] = a.expires_ts
    data["decided_ts"] = a.decided_ts
    data["result"] = a.result
    # Strict JSON, so whatever reads it back (the API, the page, the CLI) can always show it.
    return json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False)


def load(row: tuple[Any, ...]) -> Approval:
    text, owner, lease_ts, retired = row
    # json_safe: rows written before strict JSON may hold NaN, which no JSON response can carry.
    d: dict[str, Any] = json_safe(json.loads(text))
    p = d["principal"]
    return Approval(
        id=d["id"], call_id=d["call_id"], digest=d["args_digest"],
        principal=Principal.from_record(p, p.get("claims") or {}), session_id=d["session"],
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
        executed_at=d.get("executed_at"), args_redacted=bool(d.get("args_redacted", False)),
        edit=Edit.from_dict(d["edit"]) if d.get("edit") else None,
    )


def _timestamp(stamp: str | None) -> float | None:
    """A stored RFC 3339 time as a UNIX time (rows from before ``decided_ts`` was kept)."""
    try:
        return parse_rfc3339(stamp) if stamp else None
    except ValueError:
        return None


def add_audience(db: Db, approval: Approval) -> None:
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
                       (load((text, None, None, 0)).session_id, approval_id))
    if "tool" not in have:
        for approval_id, text in db.execute("SELECT id, data FROM approvals").fetchall():
            approval = load((text, None, None, 0))
            db.execute("UPDATE approvals SET tool = ? WHERE id = ?", (approval.tool, approval_id))
            add_audience(db, approval)
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
