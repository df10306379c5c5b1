"""The store seam: what the pipeline, the run resolver and the sessions API need from a store.

Two backends implement it: ``SqliteStore`` (gateway/store/sqlite.py, the embedded default) and
``PostgresStore`` (gateway/store/postgres.py, for several processes and replicas). Approvals need
``ApprovalBackend`` (gateway/approvals/store.py) from the same store object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.policy.flow import HistoryEntry, Tallies, TallyChange
from gateway.store.implicit_runs import ImplicitRuns
from gateway.store.model import SessionState, TallyView
from gateway.store.usage import Totals, UsageCounter

__all__ = ["SessionStore"]

T = TypeVar("T")


class SessionStore(Protocol):
    """Sessions (agent runs), their counters, usage windows and implicit runs."""

    instance_id: str  # this process's name on the claims it makes
    where: str  # the database, as messages name it
    usage: UsageCounter
    implicit_runs: ImplicitRuns

    async def session(self, principal: str, session_id: str, client: str | None = None) -> SessionState:
        """The session as the database has it now (counts from every process), created on first sight."""
        ...

    async def implicit_run(self, principal: str, client: str, session: str | None = None) -> str:
        """The current implicit run of (principal, client) for a call of protocol ``session`` (if any), read
        from the database off the event loop (gateway/store/implicit_runs.py)."""
        ...

    async def usage_now(self, principal: str) -> dict[str, Totals]:
        """The principal's usage windows now, counting every process's calls."""
        ...

    def count_call(self, state: SessionState, tool: str) -> None:
        """Count one call, in this process's view at once; written as an increment."""
        ...

    def record_outcome(self, state: SessionState, *, rejected: bool, terminate_message: str | None = None,
                       tool: str = "") -> None:
        """Count a rejection or a termination."""
        ...

    def reset(self, state: SessionState) -> None:
        """Counters to zero, not terminated; the run's labels, tallies and history cleared."""
        ...

    def add_labels(self, state: SessionState, labels: Sequence[str]) -> None:
        """Add labels to the run (``merged_labels``: ``LabelOverflow`` past the cap), in memory at once, written
        behind."""
        ...

    def add_history(self, state: SessionState, entry: HistoryEntry) -> None:
        """Append an entry to the run's history (the newest kept), in memory at once, written behind."""
        ...

    async def window_tallies(self, principal: str) -> dict[str, Tallies]:
        """The principal's tallies per usage window now, counting every process's admissions ({} with none)."""
        ...

    async def admit(self, state: SessionState, judge: Callable[[TallyView], tuple[T, TallyChange | None]]) -> T:
        """In one transaction: read the run's and the principal's tallies fresh, ``judge`` them (the call's
        decision and what it adds), count what it adds; ``judge``'s result. ``StoreUnavailable`` if the
        database fails (a ``judge`` that raises rolls back and its error goes on)."""
        ...

    def end(self, state: SessionState, message: str) -> None:
        """Terminate the run with ``message``."""
        ...

    async def find_session(self, principal: str, session_id: str) -> SessionState | None:
        """The session if it exists (never creates one)."""
        ...

    def list_sessions(self, principal: str | None, implicit: bool | None, terminated: bool | None,
                      limit: int, offset: int) -> tuple[list[SessionState], int]:
        """One page of sessions (blocking: call through ``run`` after ``flushed``)."""
        ...

    async def unreachable(self) -> str | None:
        """Why the database cannot be read now (a short reason, no address), or None when it answers."""
        ...

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run blocking database work on the store's worker thread."""
        ...

    async def flushed(self) -> None:
        """Wait until every count queued so far is written."""
        ...

    async def settle(self) -> None:
        """At the end of a call: wait for its counts to be written when other processes share the store."""
        ...

    def close(self) -> None:
        """Finish queued writes and close."""
        ...
