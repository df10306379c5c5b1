"""What a caller is told about an expired request: every way a request stops applying reads differently.

The end-to-end tests reach the timeout and the unused-approval texts; a person's approval that lands
after the request expired (another process, or a decision racing the timeout), the wording of
``valid_for`` in hours, minutes and seconds, and a set-aside request are pinned here.
"""

from __future__ import annotations

from gateway.approvals.messages import expired_message, lapse_reason, late_vote
from gateway.approvals.model import POLICY_CHANGE, Approval, ApprovalState, Requirement, Vote
from gateway.policy.call import Principal

EXPIRES = 1_000.0


def approval(*votes: Vote, decided_ts: float | None = None, valid_for: float = 300.0) -> Approval:
    """An expired request with these votes."""
    return Approval(id="a1", call_id="c1", digest="d", principal=Principal("agent", ()), session_id="s",
                    tool="deploy", original_args={}, final_args={},
                    requirements=[Requirement("r", "m", ["group:managers"], None)], created_at="",
                    expires_at="", expires_ts=EXPIRES, on_timeout="reject", state=ApprovalState.EXPIRED,
                    votes=list(votes), decided_ts=decided_ts, valid_for=valid_for)


def vote(approver: str, approve: bool = True, comment: str = "") -> Vote:
    return Vote(approver, [], approve, comment, "2026-12-01T00:00:00Z")


def test_nobody_deciding_in_time_is_said_so() -> None:
    assert expired_message(approval(vote("timeout", False))) == "Nobody approved this call in time, so it was not run."


def test_an_approval_given_after_the_request_expired_is_named_late() -> None:
    late = approval(vote("dave"), vote("validity", False), decided_ts=EXPIRES + 5)
    assert late_vote(late)
    assert lapse_reason(late) == "approved after the request expired"
    assert "was given after the request had expired" in expired_message(late)


def test_an_allow_on_timeout_is_no_late_vote() -> None:
    allowed = approval(vote("timeout"), vote("validity", False), decided_ts=EXPIRES + 5)
    assert not late_vote(allowed)
    assert "expired unused" in expired_message(allowed)


def test_valid_for_reads_in_the_largest_whole_unit() -> None:
    for seconds, said in ((7200, "2h"), (300, "5m"), (90, "90s")):
        unused = approval(vote("dave"), vote("validity", False), decided_ts=EXPIRES - 1, valid_for=seconds)
        assert lapse_reason(unused) == f"approved, but not used within {said}"
        assert f"was valid for {said} after it was given" in expired_message(unused)


def test_a_set_aside_request_says_what_the_policies_need_now() -> None:
    aside = approval(vote(POLICY_CHANGE, False, "the policies now need approval by r: group:security"))
    message = expired_message(aside)
    assert message.startswith("Approval a1 no longer applies (the policies now need approval by r: group:security)")
