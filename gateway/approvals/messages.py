"""What a caller is told about its approval: the texts of refusals, and how a request's votes read.

Every part of the approval service (the gate, the one run, expiry) answers in these words, so a
retry hears the same thing whichever part found the outcome.
"""

from __future__ import annotations

from typing import Any

from gateway.approvals.model import POLICY_CHANGE, Approval, Vote
from gateway.core.durations import duration_unit_text

__all__ = ["EDIT_NOT_RELEASED", "END_USER", "NOT_REACHED_WAITER", "POLICIES_CHANGED", "STORE_UNAVAILABLE",
           "denial_message", "expired_message", "lapse_of", "lapse_reason", "late_vote", "pending_message", "refusal",
           "set_aside_by"]

# Votes cast by the end user through MCP elicitation are recorded under this prefix.
END_USER = "end-user:"

STORE_UNAVAILABLE = ("The approval could not be read or recorded (the gateway's database is busy), so the call "
                     "was not run. Try again shortly.")
POLICIES_CHANGED = ("The policies changed while this call waited for its approval, so it was not run. Call again "
                    "with the same arguments: the policies in force now decide it.")
EDIT_NOT_RELEASED = ("An approver edited the arguments of this call and approved the edited call, but when it was "
                     "released the policies no longer let it run with them, so it was not run. Call again to ask "
                     "for a new approval.")
NOT_REACHED_WAITER = ("The approved call was tried, but its service could not be reached, so it was not sent. "
                      "The approval is still valid: call again to run it.")


def denial_message(approval: Approval) -> str:
    """Who refused the call, and why if they said."""
    vote = next((v for v in reversed(approval.votes) if not v.approve), None)
    if vote is not None and vote.approver.startswith(END_USER):
        return "The user declined this call."
    comment = vote.comment if vote else ""
    return f"Denied by an approver: {comment}" if comment else "Denied by an approver."


def lapse_of(approval: Approval) -> Vote | None:
    """The record of an approval that expired unused (or was given too late), if it did."""
    return next((v for v in approval.votes if v.approver == "validity"), None)


def set_aside_by(approval: Approval) -> Vote | None:
    """The record of a request set aside because the policies came to need other approvers, if it was."""
    return next((v for v in approval.votes if v.approver == POLICY_CHANGE), None)


def late_vote(approval: Approval) -> bool:
    """Whether the approval was given by a person after the request had expired."""
    return approval.decided_ts is not None and approval.decided_ts > approval.expires_ts and \
        not any(v.approver == "timeout" for v in approval.votes)


def lapse_reason(approval: Approval) -> str:
    """Why an approved request may no longer be used (recorded with its "validity" vote)."""
    if late_vote(approval):
        return "approved after the request expired"
    return f"approved, but not used within {duration_unit_text(approval.valid_for)}"


def expired_message(approval: Approval) -> str:
    """Why an expired request did not run the call, and what to do now."""
    set_aside = set_aside_by(approval)
    if set_aside is not None:
        return (f"Approval {approval.id} no longer applies ({set_aside.comment}), so the call was not run. "
                "Call again with the same arguments to ask for the approval needed now.")
    if lapse_of(approval) is None:
        return "Nobody approved this call in time, so it was not run."
    if late_vote(approval):
        return f"Approval {approval.id} was given after the request had expired, so the call was not run. " \
            "Call again to ask for a new approval."
    return (f"Approval {approval.id} was valid for {duration_unit_text(approval.valid_for)} after it was given and "
            "has expired unused, so the call was not run. Call again to ask for a new approval.")


def pending_message(approval: Approval, page_url: str) -> str:
    """What the model reads when the hold is over: not run yet, which request, until when, what to do."""
    return (f"Approval pending: this call to {approval.tool} needs a person's approval and has not run yet "
            f"(approval request {approval.id}, {page_url}/{approval.id}; it expires at "
            f"{approval.expires_at}). To get the outcome, call {approval.tool} again with exactly the same "
            "arguments: once approved, that call runs it (once); if it was denied or expired, that call says so.")


def refusal(call_id: str, decision: str, message: str, approval_id: str | None) -> dict[str, Any]:
    """A refusal in the stored-outcome shape (what CallOutcome.to_rest gives)."""
    meta = {"gateway/call_id": call_id, "gateway/decision": decision}
    if approval_id is not None:
        meta["gateway/approval_id"] = approval_id
    return {"call_id": call_id, "decision": decision, "is_error": True,
            "content": [{"type": "text", "text": message}], "structured": None, "meta": meta}
