"""Human approval: hold a call for a decision, exactly once."""

from __future__ import annotations

from gateway.approvals.model import Approval, ApprovalState, Requirement, Vote, args_digest, qualifies
from gateway.approvals.notification import Notifier
from gateway.approvals.service import ApprovalService
from gateway.approvals.store import ApprovalStore

__all__ = ["Approval", "ApprovalService", "ApprovalState", "ApprovalStore", "Notifier", "Requirement", "Vote",
           "args_digest", "qualifies"]
