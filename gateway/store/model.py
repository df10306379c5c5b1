"""What a store keeps about an agent run (a session), whichever database holds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.policy.flow import HistoryEntry, Tallies

__all__ = ["SessionState", "TallyView"]


@dataclass(slots=True)
class SessionState:
    """One agent session's counters."""

    id: str
    started_at: str
    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    terminated: bool = False
    terminate_message: str | None = None
    principal: str = ""  # whose session it is (sessions are keyed by principal and id)
    implicit: bool = False  # the gateway made this run up for a client that named none
    client: str | None = None  # for an implicit run: the client it was made for
    labels: list[str] = field(default_factory=list)  # every label added in the run, in the order added
    tallies: Tallies = field(default_factory=Tallies)  # the run's tallies (written only by ``SessionStore.admit``)
    history: list[HistoryEntry] = field(default_factory=list)  # the run's last calls, oldest first

    def to_dict(self) -> dict[str, Any]:
        """The session as the admin API shows it."""
        return {"principal": self.principal, "id": self.id, "implicit": self.implicit, "client": self.client,
                "started_at": self.started_at, "calls": self.calls, "calls_by_tool": dict(self.calls_by_tool),
                "rejected": self.rejected, "terminated": self.terminated, "terminate_message": self.terminate_message,
                "labels": list(self.labels), "tallies": dict(self.tallies.values),
                "seen": {k: list(v) for k, v in self.tallies.seen.items()}, "history": list(self.history)}


@dataclass(slots=True)
class TallyView:
    """The tallies an admission reads, fresh under its lock: the run's, and the principal's per usage window."""

    run: Tallies
    windows: dict[str, Tallies] = field(default_factory=dict)
