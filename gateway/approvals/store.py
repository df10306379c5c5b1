"""Approval requests in SQLite, beside the sessions; every state change is compare-and-set.

The in-process lock serialises writers; the ``WHERE state = ?`` guard on each transition is what
makes "approved → executing" happen once even if two callers race for it.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.approvals.model import Approval, ApprovalState, Requirement, Vote
from gateway.policy.call import Principal
from gateway.store.sqlite import SqliteStore

__all__ = ["ApprovalStore"]

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
CREATE UNIQUE INDEX IF NOT EXISTS approvals_call ON approvals (principal, call_id, digest);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, expires_ts);
"""


def _dump(a: Approval) -> str:
    data = a.to_dict()
    data["principal"]["claims"] = a.principal.claims
    data["expires_ts"] = a.expires_ts
    data["result"] = a.result
    return json.dumps(data, ensure_ascii=False, default=str)


def _load(text: str) -> Approval:
    d: dict[str, Any] = json.loads(text)
    p = d["principal"]
    return Approval(
        id=d["id"], call_id=d["call_id"], digest=d["args_digest"],
        principal=Principal(p["id"], tuple(p["groups"]), p.get("claims") or {}), session_id=d["session"],
        tool=d["tool"], original_args=d["original_args"], final_args=d["final_args"],
        requirements=[Requirement(r["rule"], r["message"], r["approvers"], r["satisfied_by"], r.get("via", "page"))
                      for r in d["requirements"]],
        created_at=d["created_at"], expires_at=d["expires_at"], expires_ts=d["expires_ts"],
        on_timeout=d["on_timeout"], state=ApprovalState(d["state"]),
        votes=[Vote(v["approver"], v["groups"], v["approve"], v["comment"], v["at"], v.get("rules", []))
               for v in d["votes"]],
        result=d.get("result"), decided_at=d.get("decided_at"),
    )


class ApprovalStore:
    """CRUD and guarded transitions for approval requests."""

    def __init__(self, store: SqliteStore) -> None:
        self._db = store.connection
        self._lock = store.lock
        with self._lock:
            self._db.executescript(_SCHEMA)

    def insert(self, approval: Approval) -> Approval:
        """Store a new request; if one exists for the same principal, call id and arguments, return that."""
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM approvals WHERE principal = ? AND call_id = ? AND digest = ?",
                (approval.principal.id, approval.call_id, approval.digest)).fetchone()
            if row is not None:
                return _load(row[0])
            self._db.execute(
                "INSERT INTO approvals (id, call_id, principal, digest, state, expires_ts, created_at, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (approval.id, approval.call_id, approval.principal.id, approval.digest, str(approval.state),
                 approval.expires_ts, approval.created_at, _dump(approval)))
        return approval

    def find(self, principal: str, call_id: str, digest: str) -> Approval | None:
        """The request for this principal's call id and arguments."""
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM approvals WHERE principal = ? AND call_id = ? AND digest = ?",
                (principal, call_id, digest)).fetchone()
        return _load(row[0]) if row else None

    def for_call(self, principal: str, call_id: str) -> list[Approval]:
        """Every request for this principal's call id (one per set of arguments), newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT data FROM approvals WHERE principal = ? AND call_id = ? ORDER BY created_at DESC",
                (principal, call_id)).fetchall()
        return [_load(r[0]) for r in rows]

    def in_state(self, state: ApprovalState) -> list[Approval]:
        """Every request in one state."""
        with self._lock:
            rows = self._db.execute("SELECT data FROM approvals WHERE state = ?", (str(state),)).fetchall()
        return [_load(r[0]) for r in rows]

    def get(self, approval_id: str) -> Approval | None:
        """One request by id."""
        with self._lock:
            row = self._db.execute("SELECT data FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return _load(row[0]) if row else None

    def list_requests(self, state: str | None = None, limit: int = 200, offset: int = 0) -> tuple[list[Approval], int]:
        """One page of requests, newest first, optionally in one state; and how many there are in all."""
        where, params = ("WHERE state = ?", (state,)) if state else ("", ())
        with self._lock:
            total = self._db.execute(f"SELECT COUNT(*) FROM approvals {where}", params).fetchone()[0]
            rows = self._db.execute(f"SELECT data FROM approvals {where} ORDER BY created_at DESC, id"
                                    " LIMIT ? OFFSET ?", (*params, limit, offset)).fetchall()
        return [_load(r[0]) for r in rows], int(total)

    def due(self, now_ts: float) -> list[Approval]:
        """Pending requests whose time is up."""
        with self._lock:
            rows = self._db.execute("SELECT data FROM approvals WHERE state = ? AND expires_ts <= ?",
                                    (str(ApprovalState.PENDING), now_ts)).fetchall()
        return [_load(r[0]) for r in rows]

    def transition(self, approval: Approval, expected: ApprovalState) -> bool:
        """Save ``approval`` only if its stored state is still ``expected``; False if someone else won."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE approvals SET state = ?, data = ? WHERE id = ? AND state = ?",
                (str(approval.state), _dump(approval), approval.id, str(expected)))
            return cursor.rowcount == 1
