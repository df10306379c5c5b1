"""A database written by the first release (approvals keyed without the tool) opens and is migrated.

Its unique index on (principal, call id, digest) would make a call to another tool with the same
call id and arguments collide with the old request; after migration the key includes the tool, the
old rows have their tool and audience filled in, and they are found, listed and decided as before.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from gateway.approvals.model import Approval, Requirement, args_digest
from gateway.approvals.store import ApprovalStore, ListFilter
from gateway.core.clock import now_rfc3339
from gateway.policy.call import Principal
from gateway.store.sqlite import SqliteStore

OLD_SCHEMA = """
CREATE TABLE approvals (
    id TEXT PRIMARY KEY, call_id TEXT NOT NULL, principal TEXT NOT NULL, digest TEXT NOT NULL,
    state TEXT NOT NULL, expires_ts REAL NOT NULL, created_at TEXT NOT NULL, data TEXT NOT NULL
);
CREATE UNIQUE INDEX approvals_call ON approvals (principal, call_id, digest);
CREATE INDEX approvals_state ON approvals (state, expires_ts);
"""

ARGS = {"note_id": 1}


def _approval(approval_id: str, tool: str, approvers: str = "group:notes-admins") -> Approval:
    now = time.time()
    return Approval(id=approval_id, call_id="c-1", digest=args_digest(ARGS), principal=Principal("agent", ("bots",)),
                    session_id="s", tool=tool, original_args=ARGS, final_args=ARGS,
                    requirements=[Requirement("rule", "Needs a human", [approvers])],
                    created_at=now_rfc3339(), expires_at="2099-01-01T00:00:00Z", expires_ts=now + 600,
                    on_timeout="reject")


def _old_row(db: Path) -> None:
    """One pending request as the first release stored it."""
    old = _approval("old0000000000001", "notes_delete_note")
    data = old.to_dict()
    for key in ("valid_for_seconds", "valid_until"):
        del data[key]
    data["principal"]["claims"], data["expires_ts"], data["result"] = {}, old.expires_ts, None
    with sqlite3.connect(db) as conn:
        conn.executescript(OLD_SCHEMA)
        conn.execute("INSERT INTO approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (old.id, old.call_id, "agent", old.digest, "pending", old.expires_ts, old.created_at,
                      json.dumps(data)))


def test_an_old_database_is_migrated_and_the_tool_joins_the_key(tmp_path: Path) -> None:
    db = tmp_path / "gateway.sqlite3"
    _old_row(db)

    sqlite = SqliteStore(db)
    try:
        store = ApprovalStore(sqlite)
        # A row from before version 3 has no upstream: only a key without one finds it (a real call names its
        # upstream, so its retry asks afresh rather than trust a request that does not say whose tool it was).
        found = store.find("agent", "", "notes_delete_note", "c-1", args_digest(ARGS))
        assert found is not None and found.id == "old0000000000001"
        assert store.find("agent", "notes", "notes_delete_note", "c-1", args_digest(ARGS)) is None
        assert store.find("agent", "", "payments_transfer", "c-1", args_digest(ARGS)) is None
        # Same principal, call id and digest, another tool: no collision with the old key.
        other = store.insert(_approval("new0000000000002", "payments_transfer", "group:finance"))
        assert other.id == "new0000000000002"
        page, total = store.list_requests(which=ListFilter(audience=("group:notes-admins",)))
        assert ([a.id for a in page], total) == (["old0000000000001"], 1)  # the old row's audience was filled in
        assert store.list_requests(which=ListFilter(audience=("group:other",)))[1] == 0
    finally:
        sqlite.close()
    ApprovalStore(reopened := SqliteStore(db))  # migrating again changes nothing
    reopened.close()


def test_an_old_database_gets_the_run_binding_and_its_rows_keep_their_call_id_binding(tmp_path: Path) -> None:
    """A file from before run-bound requests (issue 8): its rows get their run filled in and stay bound by
    call id; a call without a call id in the same run and arguments is a new request, then found by run."""
    db = tmp_path / "gateway.sqlite3"
    _old_row(db)
    sqlite = SqliteStore(db)
    try:
        store = ApprovalStore(sqlite)
        columns = {row[1] for row in sqlite.connection.execute("PRAGMA table_info(approvals)")}
        assert {"session", "by_run"} <= columns
        assert sqlite.connection.execute("SELECT session, by_run FROM approvals").fetchall() == [("s", 0)]
        assert store.find_by_run("agent", "", "s", "notes_delete_note", args_digest(ARGS)) is None
        first = _approval("run0000000000001", "notes_delete_note")
        first.call_id, first.by_run = "generated-1", True
        assert store.insert(first).id == first.id
        retry = _approval("run0000000000002", "notes_delete_note")
        retry.call_id, retry.by_run = "generated-2", True
        assert store.insert(retry).id == first.id  # the same run, tool and arguments: the same request
        found = store.find_by_run("agent", "", "s", "notes_delete_note", args_digest(ARGS))
        assert found is not None and found.id == first.id and found.by_run
        store.retire(first.id)  # its outcome was given: the next identical call is a new request
        assert store.insert(retry).id == retry.id
    finally:
        sqlite.close()
