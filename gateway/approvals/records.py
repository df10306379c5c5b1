"""The approval requests as the parts of the approval service reach them, and the clock they share.

Every database access runs on the store's worker thread (the store's ``run``): a locked file delays
the callers that need it, never the event loop, and ends in ``StoreUnavailable``, which callers get
as a clear refusal. A worker already shut down (the gateway is stopping) is ``StoreUnavailable`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gateway.approvals.store import ApprovalStore
from gateway.core.errors import StoreUnavailable

__all__ = ["Records"]

T = TypeVar("T")


class Records:
    """The store, run off the event loop, with the clock and this process's id."""

    def __init__(self, store: ApprovalStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self.instance_id = store.instance_id  # names this process's claims

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run one store method on the store's worker thread."""
        try:
            return await self.store.run(work, *args)
        except RuntimeError as exc:  # the worker was shut down: the gateway is stopping
            raise StoreUnavailable(f"the approvals database is closed ({exc})") from exc
