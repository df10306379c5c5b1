"""Approver sessions: they end at their lifetime whatever their use, at sign-out, and only the right value finds one."""

from __future__ import annotations

from gateway.auth.keys import Identity
from gateway.auth.sso_sessions import Sessions
from gateway.policy.call import Principal


class Clock:
    """A clock the test moves by hand (the sessions take their time from it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


APPROVER = Identity(Principal("alice", ("leads",), kind="jwt", issuer="https://idp", subject="alice"), approver=True)


def test_a_session_ends_at_its_lifetime_even_while_it_is_used():
    clock = Clock()
    sessions = Sessions(3600, clock=clock)
    value, session = sessions.create(APPROVER, "id-token")
    for _ in range(5):  # used every 10 minutes: not renewed
        clock.now += 600
        assert sessions.get(value) is session
    clock.now += 600
    assert sessions.get(value) is None
    assert len(sessions) == 0


def test_sign_out_ends_the_session_and_the_value_is_worth_nothing_after():
    sessions = Sessions(3600)
    value, session = sessions.create(APPROVER)
    assert sessions.end(value) is session
    assert sessions.get(value) is None
    assert sessions.end(value) is None


def test_only_the_exact_value_finds_a_session():
    sessions = Sessions(3600)
    value, _ = sessions.create(APPROVER)
    for forged in ("", value[:-1], value + "x", value.upper() if value.upper() != value else value.lower(), "x" * 5000):
        assert sessions.get(forged) is None
    assert sessions.get(None) is None


def test_the_csrf_token_is_the_sessions_own():
    sessions = Sessions(3600)
    _, one = sessions.create(APPROVER)
    _, two = sessions.create(APPROVER)
    assert one.csrf != two.csrf
    assert one.csrf_matches(one.csrf) and not one.csrf_matches(two.csrf) and not one.csrf_matches(None)
    assert one.csrf not in repr(one)


def test_a_full_table_drops_the_oldest_session():
    sessions = Sessions(3600, limit=2)
    first, _ = sessions.create(APPROVER)
    second, _ = sessions.create(APPROVER)
    third, _ = sessions.create(APPROVER)
    assert sessions.get(first) is None
    assert sessions.get(second) is not None and sessions.get(third) is not None
