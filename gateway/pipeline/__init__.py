"""The life of one tool call, transport-independent: resolve → request policies → check args →
approve → execute → response policies → result → audit → session counters."""

from __future__ import annotations

from gateway.pipeline.approvals import ApprovalGate, ApprovalResult, HeldCall, NoApprovals
from gateway.pipeline.lifecycle import Gateway
from gateway.pipeline.request import CallOutcome, CallRequest

__all__ = ["ApprovalGate", "ApprovalResult", "CallOutcome", "CallRequest", "Gateway", "HeldCall", "NoApprovals"]
