"""The one run an approval allows: claimed by exactly one caller, its lease kept alive, its outcome stored.

An approved request is claimed (approved → executing) by exactly one caller; everyone else, now or
after a restart, waits for and gets the stored result of that one execution. A claim names the
gateway process that made it and holds a lease, renewed while the call runs, so only a claim whose
lease ran out (its process died) is marked "interrupted" (see ``expiry``), and a second gateway on
the same database never touches the first one's running calls. A run that provably never reached
the upstream (``released``) gives the approval back for a retry. A result the locked database
cannot take yet is kept here for the waiters, and stored when the database comes back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.approvals.messages import STORE_UNAVAILABLE, denial_message, refusal
from gateway.approvals.model import Approval, ApprovalState
from gateway.approvals.notification import Notification
from gateway.approvals.records import Records
from gateway.core.clock import now_rfc3339
from gateway.core.errors import StoreUnavailable
from gateway.core.limits import APPROVAL_HEARTBEAT_SECONDS, APPROVAL_LEASE_SECONDS, APPROVAL_RESULT_RETRY_SECONDS
from gateway.policy.catalog import CLIENT_UPSTREAM

__all__ = ["Claims"]

log = logging.getLogger("gateway.approvals")


class Claims:
    """Claims on approved requests, their leases, and the outcome of the run each allowed."""

    def __init__(self, records: Records, notification: Notification, *,
                 lease_seconds: float = APPROVAL_LEASE_SECONDS,
                 heartbeat_seconds: float = APPROVAL_HEARTBEAT_SECONDS) -> None:
        self._records = records
        self._store = records.store
        self._notification = notification
        self._lease = lease_seconds
        self._heartbeat = heartbeat_seconds
        self._heartbeats: dict[str, asyncio.Task[None]] = {}
        # Results of runs in this process not yet stored (the database was locked): waiters get them here.
        self._outcomes: dict[str, dict[str, Any]] = {}
        self._background: set[asyncio.Task[None]] = set()

    def outcome(self, approval_id: str) -> dict[str, Any] | None:
        """The result of this process's run of the request, while it waits to be stored."""
        return self._outcomes.get(approval_id)

    async def claim(self, approval: Approval, now: float) -> bool:
        """approved → executing, owned by this process under a lease (then renewed); False if another caller won."""
        approval.state, approval.owner, approval.lease_ts = \
            ApprovalState.EXECUTING, self._records.instance_id, now + self._lease
        claiming = asyncio.ensure_future(self._records.run(self._store.transition, approval, ApprovalState.APPROVED))
        try:
            claimed = await asyncio.shield(claiming)
        except asyncio.CancelledError:
            # The caller left while the claim was being written: nothing will run, so give it back.
            claiming.add_done_callback(lambda done: self._give_back(approval.id, done))
            raise
        if claimed:
            self._heartbeats[approval.id] = asyncio.create_task(self._renew(approval.id),
                                                                name=f"approval-lease-{approval.id}")
        return claimed

    def _give_back(self, approval_id: str, claiming: asyncio.Future[bool]) -> None:
        if claiming.cancelled() or claiming.exception() is not None or not claiming.result():
            return
        self._in_background(asyncio.ensure_future(self.released(approval_id)))

    def _in_background(self, task: asyncio.Task[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _renew(self, approval_id: str) -> None:
        """Keep this process's claim alive while the call runs (and while its result waits to be stored)."""
        while True:
            await asyncio.sleep(self._heartbeat)
            try:
                if not await self._records.run(self._store.renew, approval_id, self._records.instance_id,
                                               self._records.clock() + self._lease):
                    return  # settled, or taken over after the lease ran out
            except StoreUnavailable as exc:
                log.warning("approval %s: lease not renewed: %s", approval_id, exc)

    def _stop_heartbeat(self, approval_id: str) -> None:
        task = self._heartbeats.pop(approval_id, None)
        if task is not None:
            task.cancel()

    async def executed(self, approval_id: str, result: dict[str, Any]) -> None:
        """Store the one execution's result, for every retry of the call (retried while the database is locked)."""
        self._outcomes[approval_id] = result
        self._notification.signal(approval_id)

        def settle(approval: Approval) -> None:
            approval.state, approval.result, approval.executed_at = ApprovalState.EXECUTED, result, now_rfc3339()
            # The caller that ran it is given this outcome now: a run-bound request lets go of its key.
            approval.retired = approval.retired or approval.by_run

        await self._settle(approval_id, settle, "result")

    async def released(self, approval_id: str) -> None:
        """The run never reached the upstream: the approval is usable again (within its validity)."""

        def settle(approval: Approval) -> None:
            approval.state = ApprovalState.APPROVED

        await self._settle(approval_id, settle, "release")

    async def _settle(self, approval_id: str, change: Callable[[Approval], None], what: str) -> None:
        try:
            await self._end_claim(approval_id, change)
        except StoreUnavailable as exc:
            log.warning("approval %s: %s not stored yet, retrying: %s", approval_id, what, exc)
            self._in_background(asyncio.create_task(self._end_claim_later(approval_id, change),
                                                    name=f"approval-{what}"))

    async def _end_claim(self, approval_id: str, change: Callable[[Approval], None]) -> None:
        """Apply ``change`` to this process's claim and drop the claim; a claim no longer ours is left alone."""
        approval = await self._records.run(self._store.get, approval_id)
        mine = self._records.instance_id
        if approval is not None and approval.state is ApprovalState.EXECUTING and approval.owner == mine:
            change(approval)
            approval.owner, approval.lease_ts = None, None
            await self._records.run(self._store.transition, approval, ApprovalState.EXECUTING, mine)
        self._stop_heartbeat(approval_id)
        self._outcomes.pop(approval_id, None)
        self._notification.signal(approval_id)

    async def _end_claim_later(self, approval_id: str, change: Callable[[Approval], None]) -> None:
        while True:
            await asyncio.sleep(APPROVAL_RESULT_RETRY_SECONDS)
            try:
                await self._end_claim(approval_id, change)
                log.info("approval %s: stored after the database came back", approval_id)
                return
            except StoreUnavailable:
                continue

    async def orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        """A retry of an approved call whose tool is gone: the stored result, or "no longer available".

        A still-pending request is left as it is (the tool may come back before it is decided).
        """
        try:
            return await self._orphaned(principal_id, call_id, tool)
        except StoreUnavailable as exc:
            log.warning("call %s to %s refused: %s", call_id, tool, exc)
            return refusal(call_id, "store_unavailable", STORE_UNAVAILABLE, None)

    async def _orphaned(self, principal_id: str, call_id: str, tool: str) -> dict[str, Any] | None:
        for approval in await self._records.run(self._store.for_call, principal_id, call_id, tool):
            if approval.upstream == CLIENT_UPSTREAM:
                continue  # an agent-run tool never leaves a registry: it is not the gone tool of this call
            if approval.state is ApprovalState.EXECUTED and approval.result is not None:
                return approval.result
            if approval.state is ApprovalState.APPROVED:
                approval.state, approval.owner, approval.lease_ts = ApprovalState.EXECUTING, \
                    self._records.instance_id, self._records.clock() + self._lease
                if await self._records.run(self._store.transition, approval, ApprovalState.APPROVED):
                    result = refusal(call_id, "tool_unavailable",
                                     f"The tool {tool} is no longer available, so the approved call was not run.",
                                     approval.id)
                    await self.executed(approval.id, result)
                    return result
            if approval.state is ApprovalState.DENIED:
                return refusal(call_id, "reject", denial_message(approval), approval.id)
        return None

    async def aclose(self) -> None:
        """Stop lease renewals and retries."""
        for task in [*self._heartbeats.values(), *self._background]:
            task.cancel()
        await asyncio.gather(*self._heartbeats.values(), *self._background, return_exceptions=True)
        self._heartbeats.clear()
