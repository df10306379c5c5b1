"""Telling others that a request changed: the calls held on it, the notifiers (webhooks), the audit log.

A held call waits on an event of its request (``changed``); every change made in this process
``signal``s it. A decision made through another process (another worker, another replica) wakes the
held call too: on PostgreSQL through LISTEN/NOTIFY (``watch``), on SQLite because a held call
re-reads its request every ``poll`` seconds (``APPROVAL_SHARED_POLL_SECONDS``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from gateway.approvals.model import Approval
from gateway.approvals.store import ApprovalStore
from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.core.limits import APPROVAL_NOTIFY_FALLBACK_SECONDS, APPROVAL_SHARED_POLL_SECONDS
from gateway.core.redaction import Redaction
from gateway.observe.tracing import current_trace_id

__all__ = ["Notification", "Notifier"]

log = logging.getLogger("gateway.approvals")


class Notifier(Protocol):
    """Tells the outside world about approvals (webhooks); must never block or raise."""

    def notify(self, event: str, approval: Approval) -> None:
        """Queue delivery of ``event`` ("approval.created", ".decided", ".expired")."""
        ...

    async def aclose(self) -> None:
        """Finish or drop deliveries in flight."""
        ...


class Notification:
    """Wakes held calls when their request changes; tells the notifier and the audit log about requests."""

    def __init__(self, notifier: Notifier | None = None,
                 audit: Callable[[dict[str, Any]], None] | None = None, redactor: Redaction | None = None) -> None:
        self.notifier = notifier
        self._audit = audit  # the audit log's writer, for what happens with no call in flight (a lapse)
        self._redactor = redactor or Redaction()  # the audit log's redaction, for the arguments an event names
        self._changed: dict[str, asyncio.Event] = {}
        self.poll = APPROVAL_SHARED_POLL_SECONDS  # until ``watch`` finds the database pushes changes

    def changed(self, approval_id: str) -> asyncio.Event:
        """The event the next ``signal`` of this request sets (take it before reading the request)."""
        return self._changed.setdefault(approval_id, asyncio.Event())

    def signal(self, approval_id: str) -> None:
        """Wake every caller waiting on this request; the next wait takes a fresh event.

        Waiters never remove the event themselves: one that woke first would take away the
        event a slower one is about to wait on, and that one would sleep through the next change.
        """
        event = self._changed.pop(approval_id, None)
        if event is not None:
            event.set()

    def watch(self, store: ApprovalStore) -> None:
        """Wake held calls when another process changes their request (call once, on the event loop)."""
        loop = asyncio.get_running_loop()

        def woken(approval_id: str) -> None:  # on the store's listening thread
            loop.call_soon_threadsafe(self._woken, approval_id)

        if store.listen(woken):
            self.poll = APPROVAL_NOTIFY_FALLBACK_SECONDS

    def _woken(self, approval_id: str) -> None:
        if approval_id:
            self.signal(approval_id)
            return
        for waiting in list(self._changed):  # (re)connected: anything may have changed
            self.signal(waiting)

    def notify(self, event: str, approval: Approval) -> None:
        """Hand ``event`` about ``approval`` to the notifier, if there is one."""
        if self.notifier is not None:
            self.notifier.notify(event, approval)

    def audit(self, event: str, approval: Approval, **fields: Any) -> None:
        """Write an event about a request to the audit log; a failed write is logged (the state change stands)."""
        if self._audit is None:
            return
        try:
            self._audit({**audit_head(event, now_rfc3339(), current_trace_id()), "approval_id": approval.id,
                         "principal": approval.principal.to_record(),
                         "session": approval.session_id, "tool": approval.tool, "state": str(approval.state),
                         "decided_at": approval.decided_at, "execution": approval.execution(), **fields})
        except Exception as exc:  # an audit failure must not stop the sweeper
            log.error("approval %s: %s not audited: %s", approval.id, event, exc)

    def audit_edit(self, approval: Approval) -> None:
        """``approval.edited``: the arguments as asked, as the approver edited them and as they will run, and who
        edited them, redacted as the audit log redacts (the pointers in ``redacted``)."""
        edit = approval.edit
        assert edit is not None
        redacted: list[str] = []
        named = (("original_args", approval.original_args), ("edited_args", edit.arguments),
                 ("final_args", edit.final_args))
        shown = {name: self._redactor.apply(value, f"/{name}", redacted)[0] for name, value in named}
        self.audit("approval.edited", approval, call_id=approval.call_id, upstream=approval.upstream, **shown,
                   edited_by=edit.by, edited_at=edit.at, verdict=edit.verdict, decided_by=edit.decided_by,
                   redacted=redacted)

    async def aclose(self) -> None:
        """Let the notifier's deliveries in flight finish (briefly)."""
        if self.notifier is not None:
            await self.notifier.aclose()
