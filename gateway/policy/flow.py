"""What a run carries from one call to the next: its labels, its tallies and its recent history, as plain values.

Pure: the pipeline (with the store keeping them), ``gateway test`` sequences and ``gateway replay`` all fold a
run's calls with these same functions, so the three agree on what a run has seen.

- A **label** names a kind of data the run has touched (``untrusted``, ``secret``). Labels only accumulate.
- A **tally** is a running value per run and per usage window: a ``sum`` of a number each admitted call gives,
  or a ``distinct`` count of the strings they name (with the values kept, up to ``MAX_SEEN_VALUES``).
- The **history** is the run's last ``RUN_HISTORY_KEPT`` calls, oldest first, without their arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.limits import MAX_RUN_LABELS, MAX_SEEN_VALUE_CHARS, MAX_SEEN_VALUES, RUN_HISTORY_KEPT

__all__ = ["HistoryEntry", "LabelOverflow", "Tallies", "TallyChange", "appended_history", "history_entry",
           "merged_labels", "seen_value"]

TallyValue = float | int
HistoryEntry = dict[str, Any]  # {tool, verdict, rule, labels, time}


class LabelOverflow(ValueError):
    """Adding the labels would take the run past ``MAX_RUN_LABELS`` (the caller fails closed)."""


@dataclass(frozen=True, slots=True)
class TallyChange:
    """What one admitted call adds: an amount per sum tally, the values it names per distinct tally."""

    sums: Mapping[str, float] = field(default_factory=dict)
    distinct: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Whether it changes no tally."""
        return not self.sums and not self.distinct

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready view (the decision log, a stored approval)."""
        return {"sums": dict(self.sums), "distinct": {k: list(v) for k, v in self.distinct.items()}}


@dataclass(slots=True)
class Tallies:
    """One run's (or one usage window's) tallies: ``values`` is what CEL reads as ``.tallies``, ``seen`` as ``.seen``.

    A sum's value is a double; a distinct tally's is the int count of different values, which goes on past the
    ``MAX_SEEN_VALUES`` kept in ``seen`` (a value not kept then counts as new: a cap errs on the strict side).
    """

    values: dict[str, TallyValue] = field(default_factory=dict)
    seen: dict[str, list[str]] = field(default_factory=dict)

    def copy(self) -> Tallies:
        """A copy that shares nothing with this one."""
        return Tallies(dict(self.values), {k: list(v) for k, v in self.seen.items()})

    def added(self, change: TallyChange) -> Tallies:
        """These tallies after ``change`` (a new object)."""
        out = self.copy()
        for tally, amount in change.sums.items():
            out.values[tally] = float(out.values.get(tally, 0.0)) + float(amount)
        for tally, values in change.distinct.items():
            kept = out.seen.setdefault(tally, [])
            count = int(out.values.get(tally, 0))
            for value in dict.fromkeys(values):  # once each, in order
                if value in kept:
                    continue
                count += 1
                if len(kept) < MAX_SEEN_VALUES:
                    kept.append(value)
            out.values[tally] = count
        return out

    def with_zeros(self, zero: Tallies) -> Tallies:
        """Every tally of ``zero`` (the declared ones at 0) with this one's values over it."""
        if not zero.values:
            return self
        return Tallies({**zero.values, **self.values}, {**zero.seen, **self.seen})

    def to_json(self) -> dict[str, Any]:
        """``{"values": ..., "seen": ...}``: how a store keeps them."""
        return {"values": dict(self.values), "seen": {k: list(v) for k, v in self.seen.items()}}

    @classmethod
    def from_json(cls, data: Any) -> Tallies:
        """Back from ``to_json`` (anything else: empty tallies)."""
        if not isinstance(data, Mapping):
            return cls()
        values: Mapping[Any, Any] = data["values"] if isinstance(data.get("values"), Mapping) else {}
        seen: Mapping[Any, Any] = data["seen"] if isinstance(data.get("seen"), Mapping) else {}
        return cls({str(k): v for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)},
                   {str(k): [str(x) for x in v] for k, v in seen.items() if isinstance(v, list)})


def seen_value(value: str) -> str:
    """A distinct value as it is kept: itself, or ``sha256:<hex>`` of it when longer than ``MAX_SEEN_VALUE_CHARS``."""
    if len(value) <= MAX_SEEN_VALUE_CHARS:
        return value
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def merged_labels(labels: Sequence[str], more: Iterable[str]) -> list[str]:
    """``labels`` with ``more`` added after them (each once, in order); ``LabelOverflow`` past ``MAX_RUN_LABELS``."""
    out = list(labels)
    have = set(out)
    for label in more:
        if label not in have:
            have.add(label)
            out.append(label)
    if len(out) > MAX_RUN_LABELS and len(out) > len(labels):
        raise LabelOverflow(f"the run would carry more than {MAX_RUN_LABELS} labels")
    return out


def history_entry(tool: str, verdict: str, rule: str | None, labels: Sequence[str], time: str) -> HistoryEntry:
    """One call as ``session.history`` shows it: no arguments (the decision log has them)."""
    return {"tool": tool, "verdict": verdict, "rule": rule or "", "labels": list(labels), "time": time}


def appended_history(history: Sequence[HistoryEntry], entry: HistoryEntry) -> list[HistoryEntry]:
    """``history`` with ``entry`` last, keeping the newest ``RUN_HISTORY_KEPT``."""
    out = [*history, entry]
    return out[-RUN_HISTORY_KEPT:]
