"""A run's labels, tallies and history, folded call by call as the pipeline keeps them, without a store.

`gateway test` sequences and `gateway replay` both carry a run from one call to the next with this, and it folds
with gateway/policy/flow.py exactly as the pipeline does: a call's tallies are added when it is admitted (allowed,
or approved and released: ``admit``), its request-stage labels when it goes on to run and its response-stage ones
after the result (``add_labels``), and every counted call leaves one history entry (``record``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.core.errors import CelEvaluationError
from gateway.core.limits import MAX_RUN_LABELS
from gateway.policy.call import SessionInfo, ToolCall, UsageInfo
from gateway.policy.decision import Decision, Verdict
from gateway.policy.flow import HistoryEntry, Tallies, TallyChange, appended_history, history_entry, merged_labels
from gateway.policy.policyset import PolicySet

__all__ = ["LABELS_REFUSED", "TALLY_REFUSED", "TALLY_RULE", "RunState", "Window"]

# What a call is refused with when a tally it adds to cannot be computed (fail closed), and the rule it is refused
# by: the pipeline's words (gateway/pipeline/flow_step.py, a room above this one).
TALLY_REFUSED = "The policy tally {tally} could not be computed, so the call is denied."
TALLY_RULE = "tally:{tally}"
# What a call is refused with when its labels would take the run past its limit (fail closed).
LABELS_REFUSED = f"The run would carry more than {MAX_RUN_LABELS} labels, so the call is denied."


@dataclass(slots=True)
class Window:
    """One usage window of the run's principal (a sequence folds its calls into it as the store does)."""

    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    tallies: Tallies = field(default_factory=Tallies)

    @classmethod
    def of(cls, usage: UsageInfo) -> Window:
        """The window as ``usage`` shows it."""
        return cls(usage.calls, dict(usage.calls_by_tool), usage.rejected,
                   Tallies(dict(usage.tallies), {k: list(v) for k, v in usage.seen.items()}))

    def info(self, zero: Tallies) -> UsageInfo:
        """What ``usage.NAME`` shows the next call."""
        tallies = self.tallies.with_zeros(zero)
        return UsageInfo(self.calls, dict(self.calls_by_tool), self.rejected, dict(tallies.values),
                         {k: list(v) for k, v in tallies.seen.items()})


@dataclass(slots=True)
class RunState:
    """One run between two calls: what ``session`` (and ``usage``, when it folds windows) shows the next call."""

    labels: list[str] = field(default_factory=list)
    tallies: Tallies = field(default_factory=Tallies)
    history: list[HistoryEntry] = field(default_factory=list)
    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    terminated: bool = False
    windows: dict[str, Window] = field(default_factory=dict)  # folded only when given (replay keeps the logged)

    @classmethod
    def from_session(cls, session: SessionInfo, tally_ids: Iterable[str] | None = None) -> RunState:
        """The run as ``session`` shows it (only the tallies named by ``tally_ids``, when given)."""
        keep = None if tally_ids is None else set(tally_ids)
        values = {str(k): v for k, v in session.tallies.items() if keep is None or k in keep}
        seen = {str(k): [str(x) for x in v] for k, v in session.seen.items() if keep is None or k in keep}
        return cls([str(x) for x in session.labels], Tallies(values, seen), [dict(e) for e in session.history],
                   session.calls, dict(session.calls_by_tool), session.rejected)

    @classmethod
    def from_logged(cls, session: Mapping[str, Any], tally_ids: Iterable[str]) -> RunState:
        """The run before a call, as a decision log's ``context.session`` recorded it (replay's start)."""
        labels = session.get("labels")
        tallies, seen, history = session.get("tallies"), session.get("seen"), session.get("history")
        return cls.from_session(SessionInfo(
            labels=[str(x) for x in labels] if isinstance(labels, list) else [],
            tallies={str(k): v for k, v in tallies.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            if isinstance(tallies, dict) else {},
            seen={str(k): v for k, v in seen.items() if isinstance(v, list)} if isinstance(seen, dict) else {},
            history=[e for e in history if isinstance(e, dict)] if isinstance(history, list) else []), tally_ids)

    def usage(self, zero: Tallies) -> dict[str, UsageInfo]:
        """The windows this state folds, as ``usage`` shows them."""
        return {name: window.info(zero) for name, window in self.windows.items()}

    def session(self, base: SessionInfo, zero: Tallies, counters: bool = True) -> SessionInfo:
        """``base`` (the run's id and start) with this state: labels, tallies (every declared one), history, and
        the counters unless ``counters`` is false (replay keeps the logged ones)."""
        tallies = self.tallies.with_zeros(zero)
        out = replace(base, labels=list(self.labels), tallies=dict(tallies.values),
                      seen={k: list(v) for k, v in tallies.seen.items()}, history=list(self.history))
        if counters:
            out = replace(out, calls=self.calls, calls_by_tool=dict(self.calls_by_tool), rejected=self.rejected)
        return out

    def admit(self, policy_set: PolicySet, call: ToolCall, decision: Decision,
              counted: Callable[[TallyChange], None] | None = None) -> Decision | None:
        """Add what the admitted ``call`` counts (on its final arguments) to the tallies (and hand it to
        ``counted``, when given); when a tally cannot be computed, nothing is added and this is the refusal the
        call gets instead of ``decision``."""
        if not policy_set.tallies_for(call.tool.name):
            return None
        try:
            change = policy_set.tally_change(replace(call, args=decision.args))
        except CelEvaluationError as exc:
            tally = _tally_named(policy_set, call, exc)
            return replace(decision, verdict=Verdict.REJECT, message=TALLY_REFUSED.format(tally=tally),
                           decided_by=TALLY_RULE.format(tally=tally))
        if not change.empty:
            self.tallies = self.tallies.added(change)
            for window in self.windows.values():
                window.tallies = window.tallies.added(change)
            if counted is not None:
                counted(change)
        return None

    def add_labels(self, labels: Iterable[str]) -> None:
        """Add ``labels`` to the run (``LabelOverflow`` past the run's limit: the caller refuses the call)."""
        self.labels = merged_labels(self.labels, labels)

    def record(self, tool: str, verdict: str, rule: str | None, labels: Iterable[str], time: str, *,
               rejected: bool = False, counters: bool = True) -> None:
        """Count one call (unless ``counters`` is false) and append its history entry."""
        if counters:
            counted: list[RunState | Window] = [self, *self.windows.values()]
            for counts in counted:
                counts.calls += 1
                counts.calls_by_tool[tool] = counts.calls_by_tool.get(tool, 0) + 1
                counts.rejected += rejected
        self.history = appended_history(self.history, history_entry(tool, verdict, rule, list(labels), time))


def _tally_named(policy_set: PolicySet, call: ToolCall, exc: CelEvaluationError) -> str:
    """The id of the tally an evaluation error is about (a ``TallyError`` names it), else the call's first."""
    named = getattr(exc, "tally", None)
    return named if isinstance(named, str) and named else policy_set.tallies_for(call.tool.name)[0].id
