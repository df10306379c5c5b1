"""Replay's runs: each run's labels, tallies and history rebuilt under the new policy set, call by call, in log order.

A run is its principal's key and its session id. Its state before its first event in the log is what that event's
``context.session`` recorded (labels, tallies, seen, history: a log that starts mid-run starts from there; tallies
the new set does not declare are dropped). Then each call is folded as the pipeline would under the new set
(gateway/testing/run_state.py): an admitted call (allowed now, or approve now and approved in the recording) adds
its tallies, computed again, and its request-stage labels, decided again; its response-stage labels are the
recording's (``flow.labels_added.response``: results are not in the log), added when the call ran then and would
run now. A poll or a retry of a held call (``approval.pending`` / ``approval.replayed``) is decided but not folded:
it was not a new call. The principal's window tallies are rebuilt the same way, across its runs, when the window
lengths are known (gateway/testing/replay_windows.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.policy.call import Principal, ToolCall
from gateway.policy.decision import Decision, Verdict
from gateway.policy.flow import LabelOverflow
from gateway.policy.policyset import PolicySet
from gateway.testing.replay_windows import WindowFolder
from gateway.testing.run_state import LABELS_REFUSED, RunState

__all__ = ["RunFolder"]

RunKey = tuple[str, str]  # (principal key, session id)


class RunFolder:
    """The runs of one replay: gives each call its run's state, and folds its new decision into it."""

    def __init__(self, policy_set: PolicySet, windows: Mapping[str, int] | None = None) -> None:
        self.policy_set = policy_set
        self.runs: dict[RunKey, RunState] = {}
        self._ids = [t.id for t in policy_set.tallies]
        # the principals' window tallies, rebuilt when the window lengths are known (else as logged)
        self.windows = WindowFolder(windows or {}, self._ids, policy_set.zero)

    def with_state(self, event: dict[str, Any], context: dict[str, Any], call: ToolCall) -> ToolCall:
        """``call`` with its run's labels, tallies and history, and its principal's window tallies, as the new set
        leaves them (counters as logged)."""
        state = self._state(event, context)
        call = self.windows.with_usage(_principal_key(event), call, _dict(context.get("usage")))
        return replace(call, session=state.session(call.session, self.policy_set.zero, counters=False))

    def fold(self, event: dict[str, Any], context: dict[str, Any], call: ToolCall, decision: Decision) -> Decision:
        """Fold the call's new ``decision`` into its run; the decision the gateway would give (a tally that
        cannot be computed, or labels past the limit, refuse an admitted call)."""
        approval = _dict(event.get("approval"))
        if approval.get("pending") or approval.get("replayed"):
            return decision  # a poll or a retry: not a new call
        state = self._state(event, context)
        tool, time, verdict = call.tool.name, call.call.time, decision.verdict
        approved = approval.get("approved") is True
        if verdict is Verdict.APPROVE and not approved:
            if approval:  # answered "no" in the recording: counted; otherwise it would be held now
                state.record(tool, str(Verdict.REJECT), decision.decided_by, [], time, counters=False)
            return decision
        if verdict is not Verdict.ALLOW and verdict is not Verdict.APPROVE:
            state.record(tool, str(verdict), decision.decided_by, [], time, counters=False)
            return decision
        admitted_at = event.get("time") if approved else time  # an approved call counts when released
        refusal = state.admit(self.policy_set, call, decision,
                              lambda change: self.windows.add(_principal_key(event), change, admitted_at))
        labels = [*decision.labels, *(_response_labels(event) if _ran(event, context) else [])]
        if refusal is None:
            try:
                state.add_labels(labels)
            except LabelOverflow:  # refused, fail closed
                refusal = replace(decision, verdict=Verdict.REJECT, message=LABELS_REFUSED)
        if refusal is not None:
            state.record(tool, str(Verdict.REJECT), refusal.decided_by, [], time, counters=False)
            return refusal
        ended = str(event.get("verdict") or Verdict.ALLOW) if _ran(event, context) else str(Verdict.ALLOW)
        state.record(tool, ended, decision.decided_by, list(dict.fromkeys(labels)), time, counters=False)
        return decision

    def _state(self, event: dict[str, Any], context: dict[str, Any]) -> RunState:
        session = _dict(context.get("session"))
        key = (_principal_key(event), str(event.get("session") or session.get("id") or ""))
        state = self.runs.get(key)
        if state is None:
            state = self.runs[key] = RunState.from_logged(session, self._ids)
        return state


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is an object; a log edited by hand may hold anything there."""
    return value if isinstance(value, dict) else {}


def _principal_key(event: dict[str, Any]) -> str:
    record = event.get("principal")
    if not isinstance(record, dict) or "id" not in record:
        return ""
    return Principal.from_record(record).key


def _ran(event: dict[str, Any], context: dict[str, Any]) -> bool:
    """Whether the recorded call went on to run: its policies let it (allow, or approve and approved)."""
    recorded = context.get("policy_verdict")
    approval = _dict(event.get("approval"))
    return recorded == "allow" or (recorded == "approve" and approval.get("approved") is True)


def _response_labels(event: dict[str, Any]) -> list[str]:
    """The labels the recording's response stage added (``flow.labels_added.response``)."""
    flow = event.get("flow")
    added = flow.get("labels_added") if isinstance(flow, dict) else None
    labels = added.get("response") if isinstance(added, dict) else None
    return [str(x) for x in labels] if isinstance(labels, list) else []
