"""The pure policy engine: load → compile → match → evaluate → decide. No web, no I/O per call."""

from __future__ import annotations

from gateway.policy.call import CallInfo, Principal, ResultInfo, SessionInfo, ToolCall, ToolInfo
from gateway.policy.decision import (
    Action,
    ApprovalRequirement,
    Decision,
    Mode,
    OnError,
    Outcome,
    RuleResult,
    Stage,
    Verdict,
)
from gateway.policy.load import check_policies, discover, load_policy_set
from gateway.policy.policyset import PolicySet

__all__ = [
    "Action",
    "ApprovalRequirement",
    "CallInfo",
    "Decision",
    "Mode",
    "OnError",
    "Outcome",
    "PolicySet",
    "Principal",
    "ResultInfo",
    "RuleResult",
    "SessionInfo",
    "Stage",
    "ToolCall",
    "ToolInfo",
    "Verdict",
    "check_policies",
    "discover",
    "load_policy_set",
]
