"""What the approver sees of a held call's run: its labels and its latest calls, read from the session store.

A pending request in the approver API gains ``run``::

    "run": {"labels": ["untrusted"], "calls": 4,
            "history": [{"tool": "mail_read", "verdict": "allow", "rule": "", "labels": ["untrusted"],
                         "time": "2026-12-02T16:20:00Z"}, ...]}    # the latest APPROVAL_RUN_HISTORY_SHOWN

The run is found by the request's principal and session (``find_session``: never made up). A run the store no
longer has, or a store that cannot be read now, leaves ``run`` out: the request is still listed and decided.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.approvals.model import Approval, ApprovalState
from gateway.core.errors import StoreUnavailable
from gateway.core.limits import APPROVAL_RUN_HISTORY_SHOWN
from gateway.store.base import SessionStore
from gateway.store.model import SessionState

__all__ = ["RunViews", "run_view"]

log = logging.getLogger("gateway.approvals")

RunKey = tuple[str, str]  # (principal key, session id)


def run_view(state: SessionState) -> dict[str, Any]:
    """The part of a run an approver sees: its labels, how many calls it made, and its latest calls."""
    return {"labels": list(state.labels), "calls": state.calls,
            "history": [dict(entry) for entry in state.history[-APPROVAL_RUN_HISTORY_SHOWN:]]}


class RunViews:
    """Adds ``run`` to the API's view of pending requests, from ``store`` (none: requests are shown alone)."""

    def __init__(self, store: SessionStore | None) -> None:
        self.store = store

    async def views(self, approvals: list[Approval]) -> list[dict[str, Any]]:
        """The API's view of each request, pending ones with their run (each run read once)."""
        runs: dict[RunKey, dict[str, Any] | None] = {}
        out = []
        for approval in approvals:
            shown = approval.to_dict()
            key = _run_key(approval) if self.store is not None else None
            if key is not None:
                if key not in runs:
                    runs[key] = await self._read(key)
                if runs[key] is not None:
                    shown["run"] = runs[key]
            out.append(shown)
        return out

    async def view(self, approval: Approval) -> dict[str, Any]:
        """The API's view of one request (with its run while it is pending)."""
        [shown] = await self.views([approval])
        return shown

    async def _read(self, key: RunKey) -> dict[str, Any] | None:
        assert self.store is not None
        try:
            state = await self.store.find_session(*key)
        except (StoreUnavailable, RuntimeError) as exc:  # RuntimeError: the store's reader has shut down
            log.warning("the run of a pending approval could not be read (%s); it is listed without it", exc)
            return None
        return None if state is None else run_view(state)


def _run_key(approval: Approval) -> RunKey | None:
    """Whose run to show: pending requests that name a run only."""
    if approval.state is not ApprovalState.PENDING or not approval.session_id:
        return None
    return approval.principal.key, approval.session_id
