"""What one call's audit events need, filled in step by step as the call goes (gateway/pipeline/lifecycle.py)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from gateway.pipeline.request import CallRequest
from gateway.policy.call import ToolCall
from gateway.policy.decision import Decision
from gateway.store.model import SessionState
from gateway.upstreams.registry import ExposedTool

__all__ = ["CallTrace"]


@dataclass(slots=True)
class CallTrace:
    """One call on its way through the steps: what the audit event and the counters need."""

    request: CallRequest
    trace_id: str | None = None  # the W3C trace id of the call (gateway/core/audit_head.py), read once
    hand_out: bool = False  # decide-only: an admitted call goes back to its caller to run, nothing runs here
    env_revision: str | None = None  # the digest of the call's ``env`` (CallSettings), else computed from it
    audit_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # shared by the intent and the outcome
    started: float = field(default_factory=time.perf_counter)
    policy_us: float = 0.0
    upstream_ms: float | None = None
    decisions: list[Decision] = field(default_factory=list)
    upstream: dict[str, Any] = field(default_factory=lambda: {"status": "not_called"})
    tool: ExposedTool | None = None  # once resolved
    session: SessionState | None = None  # once the run's session is read
    approval: dict[str, Any] | None = None
    counted: bool = False  # the session already counts this call
    uncounted: bool = False  # a poll of a pending approval or a replay: not a new call
    decided: ToolCall | None = None  # the request-stage input, for the audit's replay context
    labels_added: dict[str, list[str]] = field(default_factory=dict)  # stage -> the labels it added to the run
    tallies: dict[str, dict[str, float | int]] = field(default_factory=dict)  # tally id -> {before, after}
    # Released with an approver's edit: {edited_args, final_args, by} (gateway/pipeline/edits.py ``released``).
    edit: dict[str, Any] | None = None
