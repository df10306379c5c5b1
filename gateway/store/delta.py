"""Changes to a session's counters, written as increments so no process's counts overwrite another's.

A call counted in memory becomes a ``Delta`` (+1 call, +1 for its tool, labels to add, history to append, ...)
queued for the store's writer. The writer applies it to the stored row under a row lock (read, add, write in
one transaction), so two processes counting the same session at once both land. A process's view of a
session is the stored row with the deltas it has not written yet applied on top.

A run's tallies are no part of a delta: they change only inside an admission (gateway/store/admission.py),
which reads and writes them in one transaction. A reset clears them with the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gateway.core.limits import RUN_HISTORY_KEPT
from gateway.policy.flow import HistoryEntry, LabelOverflow, Tallies, appended_history, merged_labels

__all__ = ["STATE_COLUMNS", "Delta", "Row", "apply", "encoded", "parsed"]

# The columns of a session row a delta changes, in the order ``parsed`` reads them.
STATE_COLUMNS = "calls, calls_by_tool, rejected, terminated, terminate_message, labels, history, tallies"


class Row(NamedTuple):
    """A session row's counters, labels, history and tallies."""

    calls: int
    by_tool: dict[str, int]
    rejected: int
    terminated: bool
    message: str | None
    labels: list[str]
    history: list[HistoryEntry]
    tallies: Tallies


def parsed(values: Sequence[Any]) -> Row:
    """A row from the database's values of ``STATE_COLUMNS`` (JSON text columns decoded)."""
    labels, history = json.loads(values[5] or "[]"), json.loads(values[6] or "[]")
    return Row(int(values[0]), json.loads(values[1]), int(values[2]), bool(values[3]), values[4],
               [str(x) for x in labels] if isinstance(labels, list) else [],
               [x for x in history if isinstance(x, dict)] if isinstance(history, list) else [],
               Tallies.from_json(json.loads(values[7] or "{}")))


def encoded(row: Row) -> tuple[Any, ...]:
    """The values of ``STATE_COLUMNS`` to store for ``row``."""
    return (row.calls, json.dumps(row.by_tool), row.rejected, int(row.terminated), row.message,
            json.dumps(row.labels), json.dumps(row.history), json.dumps(row.tallies.to_json()))


@dataclass(slots=True)
class Delta:
    """What happened to one session since its row was last written."""

    created: tuple[Any, ...]  # the row's first values, if it does not exist yet (started_at, counters..., client)
    reset: bool = False  # counters, labels, history and tallies to zero first (an administrator's reset)
    calls: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    terminate: str | None = None  # terminate with this message, unless already terminated
    end: str | None = None  # terminate with this message, replacing an earlier one
    labels: list[str] = field(default_factory=list)  # labels to add (each once, in order)
    history: list[HistoryEntry] = field(default_factory=list)  # entries to append (the newest RUN_HISTORY_KEPT)

    def then(self, later: Delta) -> Delta:
        """This delta followed by ``later``, as one."""
        if later.reset:
            return later
        by_tool = dict(self.by_tool)
        for tool, n in later.by_tool.items():
            by_tool[tool] = by_tool.get(tool, 0) + n
        return Delta(self.created, self.reset, self.calls + later.calls, by_tool, self.rejected + later.rejected,
                     self.terminate or later.terminate, later.end or self.end, with_labels(self.labels, later.labels),
                     [*self.history, *later.history][-RUN_HISTORY_KEPT:])

    @property
    def empty(self) -> bool:
        """Whether it changes nothing but (maybe) creating the row."""
        return not (self.reset or self.calls or self.rejected or self.terminate or self.end or self.labels
                    or self.history)


def with_labels(labels: Sequence[str], more: Iterable[str]) -> list[str]:
    """``labels`` and ``more`` merged as ``merged_labels`` does, but never refused: what a process already added
    to a run in memory (within the cap there) is written even if other processes' labels take the stored run past
    it; nothing is dropped (it could be the one a rule looks for), and the run then refuses any new label."""
    try:
        return merged_labels(labels, more)
    except LabelOverflow:
        return list(dict.fromkeys([*labels, *more]))


def apply(row: Row, delta: Delta | None) -> Row:
    """The row after ``delta``."""
    if delta is None:
        return row
    calls, by_tool, rejected, terminated, message, labels, history, tallies = row
    if delta.reset:
        calls, by_tool, rejected, terminated, message, labels, history, tallies = \
            0, {}, 0, False, None, [], [], Tallies()
    by_tool = dict(by_tool)
    for tool, n in delta.by_tool.items():
        by_tool[tool] = by_tool.get(tool, 0) + n
    calls, rejected = calls + delta.calls, rejected + delta.rejected
    if delta.end is not None:
        terminated, message = True, delta.end
    elif delta.terminate is not None and not terminated:
        terminated, message = True, delta.terminate
    for entry in delta.history:
        history = appended_history(history, entry)
    return Row(calls, by_tool, rejected, terminated, message, with_labels(labels, delta.labels), list(history),
               tallies)
