"""Changes to a session's counters, written as increments so no process's counts overwrite another's.

A call counted in memory becomes a ``Delta`` (+1 call, +1 for its tool, ...) queued for the store's
writer. The writer applies it to the stored row under a row lock (read, add, write in one
transaction), so two processes counting the same session at once both land. A process's view of a
session is the stored row with the deltas it has not written yet applied on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Delta", "Row", "apply"]

# A session row's counters: calls, calls by tool, rejected, terminated, terminate message.
Row = tuple[int, dict[str, int], int, bool, str | None]


@dataclass(slots=True)
class Delta:
    """What happened to one session since its row was last written."""

    created: tuple[Any, ...]  # the row's first values, if it does not exist yet (started_at, counters..., client)
    reset: bool = False  # counters to zero first (an administrator's reset)
    calls: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    terminate: str | None = None  # terminate with this message, unless already terminated
    end: str | None = None  # terminate with this message, replacing an earlier one

    def then(self, later: Delta) -> Delta:
        """This delta followed by ``later``, as one."""
        if later.reset:
            return later
        by_tool = dict(self.by_tool)
        for tool, n in later.by_tool.items():
            by_tool[tool] = by_tool.get(tool, 0) + n
        return Delta(self.created, self.reset, self.calls + later.calls, by_tool, self.rejected + later.rejected,
                     self.terminate or later.terminate, later.end or self.end)

    @property
    def empty(self) -> bool:
        """Whether it changes nothing but (maybe) creating the row."""
        return not (self.reset or self.calls or self.rejected or self.terminate or self.end)


def apply(row: Row, delta: Delta | None) -> Row:
    """The counters after ``delta``."""
    if delta is None:
        return row
    calls, by_tool, rejected, terminated, message = row
    if delta.reset:
        calls, by_tool, rejected, terminated, message = 0, {}, 0, False, None
    by_tool = dict(by_tool)
    for tool, n in delta.by_tool.items():
        by_tool[tool] = by_tool.get(tool, 0) + n
    calls, rejected = calls + delta.calls, rejected + delta.rejected
    if delta.end is not None:
        terminated, message = True, delta.end
    elif delta.terminate is not None and not terminated:
        terminated, message = True, delta.terminate
    return calls, by_tool, rejected, terminated, message
