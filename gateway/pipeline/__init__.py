"""The life of one tool call, transport-independent (gateway/pipeline/lifecycle.py): limits → admit the values →
the run → resolve → check the values sent → request policies → check the final args → approve → upstream (or,
decide-only, hand out) → response policies → result → audit → session counters."""

from __future__ import annotations

from gateway.pipeline.approvals import ApprovalGate, ApprovalResult, HeldCall, NoApprovals
from gateway.pipeline.lifecycle import Gateway
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.settings import CallSettings

__all__ = ["ApprovalGate", "ApprovalResult", "CallOutcome", "CallRequest", "CallSettings", "Gateway", "HeldCall",
           "NoApprovals"]
