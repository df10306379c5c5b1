"""The run's flow through a call: tallies admitted with the decision, labels added, one history entry.

- A call of a tool some tally counts is decided inside ``SessionStore.admit``: on the run's and the principal's
  tallies read under the store's lock, and an allowed call's change is added in the same transaction, so two
  concurrent calls can never both pass a cap the first one fills (on one process or several on one database).
  The decision is made there, off the event loop, by the pure engine; its bookkeeping (timing, metrics, the
  trace) follows on the loop. A tally that cannot be computed refuses the call (fail closed).
- A call held for approval adds nothing when it is held: when it is released it is admitted again the same way
  (``readmitted``), on the tallies then, and counts if the policies still allow or approve it.
- The labels a stage's rules give are added when the call goes on to run (request stage) or after the result
  (response stage); labels that would take the run past ``MAX_RUN_LABELS`` refuse the call (fail closed).
- Every counted call leaves one entry in the run's history (``record_history``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gateway.core.clock import now_rfc3339
from gateway.core.errors import CelEvaluationError, StoreUnavailable
from gateway.core.limits import MAX_RUN_LABELS
from gateway.core.values import printable
from gateway.observe.observer import CallObserver
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.deciding import decide, evaluate_counted, noted, request_stage_call, usage_info
from gateway.pipeline.request import CallOutcome
from gateway.pipeline.results import REFUSED_AT_RELEASE, STORE_UNAVAILABLE, refusal
from gateway.pipeline.verdicts import stopped
from gateway.policy.call import ToolCall
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.policy.flow import LabelOverflow, Tallies, TallyChange, history_entry
from gateway.policy.policyset import PolicySet
from gateway.store.base import SessionStore
from gateway.store.model import SessionState, TallyView
from gateway.store.usage import Totals
from gateway.upstreams.registry import ExposedTool

__all__ = ["LABELS_FULL", "TALLY_FAILED", "add_labels", "admitted", "readmitted", "record_history", "usage_now"]

log = logging.getLogger("gateway.pipeline")

TALLY_FAILED = "The policy tally {tally} could not be computed, so the call is denied."
LABELS_FULL = f"The run would carry more than {MAX_RUN_LABELS} labels, so the call is denied."

# The verdicts whose call counts: when it is decided, and when a held call is released.
_COUNTS = frozenset({Verdict.ALLOW})
_COUNTS_RELEASED = frozenset({Verdict.ALLOW, Verdict.APPROVE})


@dataclass(frozen=True, slots=True)
class _Judged:
    """One admission's answer: the call as decided (with the tallies read under the lock) and what it adds."""

    call: ToolCall
    decision: Decision
    before: Tallies
    change: TallyChange | None


Judge = Callable[[TallyView], tuple[_Judged, TallyChange | None]]  # what ``SessionStore.admit`` asks


async def admitted(trace: CallTrace, store: SessionStore, session: SessionState, policy_set: PolicySet,
                   call: ToolCall, observer: CallObserver) -> tuple[ToolCall, Decision]:
    """The request-stage decision; for a tool a tally counts, made and counted inside the store's admission.

    Raises ``StoreUnavailable`` when the admission cannot be made (the caller refuses the call)."""
    if not policy_set.tallies_for(call.tool.name):
        return call, decide(trace, policy_set, call, observer)  # nothing to count: no trip to the store
    judged = await store.admit(session, _judge(policy_set, call, _COUNTS))
    _note_tallies(trace, judged)
    return judged.call, noted(trace, judged.decision, observer)


async def readmitted(trace: CallTrace, store: SessionStore, policy_set: PolicySet, tool: ExposedTool,
                     approved: Decision, env: dict[str, Any], observer: CallObserver,
                     asked: dict[str, Any] | None = None) -> CallOutcome | None:
    """An approved call of a tool a tally counts, admitted again as it is released: decided on the run and the
    tallies now, counted if the verdict is still allow or approve (the approved arguments are what run and
    count). ``asked``: the arguments decided (an approver's edit), else the caller's. Returns the outcome that
    ends it instead of running (the policies now refuse it, or the store cannot say), else None."""
    if not policy_set.tallies_for(tool.name):
        return None
    request = trace.request
    try:
        session = await store.session(request.principal.key, request.session_id, request.run_client)
        usage = await store.usage_now(request.principal.key)
        call = request_stage_call(request, tool, session, usage, env)  # the windows' tallies: from the view
        if asked is not None:
            call = replace(call, args=asked)
        judged = await store.admit(session, _judge(policy_set, call, _COUNTS_RELEASED, approved.args))
    except StoreUnavailable as exc:  # nothing was sent: the approval stays valid for a retry
        log.warning("approved call %s not released: %s", printable(request.call_id), exc)
        trace.upstream = {"status": "not_called", "reached": False, "error": "the store is unavailable"}
        return refusal(request.call_id, "store_unavailable", STORE_UNAVAILABLE)
    _note_tallies(trace, judged)
    if judged.decision.verdict in _COUNTS_RELEASED:
        return None
    noted(trace, judged.decision, observer)  # on the record: the rule that refuses it now
    outcome = stopped(request.call_id, session, judged.decision, store.implicit_runs.idle_timeout)
    if outcome is not None and outcome.is_error:  # the approval's one execution: refused, not run (its page says)
        outcome.meta[REFUSED_AT_RELEASE] = judged.decision.decided_by or ""
    return outcome


def _judge(policy_set: PolicySet, call: ToolCall, counts: frozenset[Verdict],
           args: dict[str, Any] | None = None) -> Judge:
    """What ``SessionStore.admit`` asks under its lock: the decision on the tallies it read, and what it adds.

    Pure and synchronous (it runs on the store's admission thread): the engine, nothing else."""

    def judge(view: TallyView) -> tuple[_Judged, TallyChange | None]:
        decided = _with_view(call, view)
        decision, counted = evaluate_counted(policy_set, decided, counts)  # counted on the decision's arguments
        change: TallyChange | Exception | None = counted
        if change is not None and args is not None and args != decision.args:  # released: on the approved ones
            change = _change(policy_set, replace(decided, args=args))
        if isinstance(change, Exception):
            decision, change = _tally_refusal(policy_set, decided, decision, change), None
        kept = None if change is None or change.empty else change
        return _Judged(decided, decision, view.run.copy(), kept), kept

    return judge


def _change(policy_set: PolicySet, call: ToolCall) -> TallyChange | Exception:
    """What ``call`` adds to its tallies on its own arguments, or why it cannot be computed."""
    try:
        return policy_set.tally_change(call)
    except Exception as exc:
        return exc


def _with_view(call: ToolCall, view: TallyView) -> ToolCall:
    """``call`` reading the tallies of ``view``: the run's as ``session``, each window's in ``usage``."""
    run = view.run
    session = replace(call.session, tallies=dict(run.values), seen=dict(run.seen))
    usage = {name: usage_info(info, view.windows.get(name)) for name, info in call.usage.items()}
    for name, tallies in view.windows.items():
        if name not in usage:
            usage[name] = usage_info(Totals(), tallies)
    return replace(call, session=session, usage=usage)


def _tally_refusal(policy_set: PolicySet, call: ToolCall, decision: Decision, exc: Exception) -> Decision:
    """The refusal of a call whose tally could not be computed (a negative amount, a missing argument, ...)."""
    tally = _failed_tally(policy_set, call.tool.name, exc)
    if not isinstance(exc, CelEvaluationError):
        log.exception("a tally raised for %s", call.tool.name)
    return replace(decision, verdict=Verdict.REJECT, message=TALLY_FAILED.format(tally=tally),
                   decided_by=f"tally:{tally}")


def _failed_tally(policy_set: PolicySet, tool: str, exc: Exception) -> str:
    """The id of the tally ``exc`` is about (a ``TallyError`` names it), else the tool's first."""
    named = getattr(exc, "tally", None)
    return named if isinstance(named, str) and named else policy_set.tallies_for(tool)[0].id


def _note_tallies(trace: CallTrace, judged: _Judged) -> None:
    """What the admission changed, for the decision log: each tally it moved, before and after."""
    change = judged.change
    if change is None:
        return
    before, after = judged.before.values, judged.before.added(change).values
    for tally in (*change.sums, *change.distinct):
        trace.tallies[tally] = {"before": before.get(tally, 0), "after": after[tally]}


async def usage_now(store: SessionStore, principal: str, policy_set: PolicySet) -> tuple[dict[str, Totals],
                                                                                       dict[str, Tallies]]:
    """The principal's usage windows now, and their tallies when the policies declare any (what ``usage.W``
    shows a call's rules). Raises ``StoreUnavailable`` when either cannot be read."""
    windows = await store.window_tallies(principal) if policy_set.tallies else {}
    return await store.usage_now(principal), windows


def add_labels(trace: CallTrace, store: SessionStore, stage: Stage, labels: tuple[str, ...],
               refused: str = LABELS_FULL) -> CallOutcome | None:
    """Add a stage's labels to the run; the refusal (``refused``) the call ends with when the run would carry too
    many."""
    if not labels:
        return None
    assert trace.session is not None
    try:
        store.add_labels(trace.session, labels)
    except LabelOverflow as exc:  # fail closed: a flood of labels must not push out the one a rule looks for
        log.warning("call %s refused: %s", trace.request.call_id, exc)
        return refusal(trace.request.call_id, "reject", refused)
    trace.labels_added[str(stage)] = list(labels)
    return None


def record_history(trace: CallTrace, store: SessionStore, session: SessionState, tool: str,
                   outcome: CallOutcome) -> None:
    """The counted call's entry in the run's history: its tool, verdict, deciding rule and the labels it added."""
    decided_by = next((d.decided_by for d in reversed(trace.decisions) if d.decided_by), None)
    labels = list(dict.fromkeys(label for added in trace.labels_added.values() for label in added))
    store.add_history(session, history_entry(tool, outcome.decision, decided_by, labels, now_rfc3339()))
