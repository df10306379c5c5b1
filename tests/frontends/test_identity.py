"""The owner the MCP SDK ties a session to: the principal's binding key, never a token."""

from __future__ import annotations

from mcp.server.auth.middleware.bearer_auth import authorization_context

from gateway.auth.keys import Identity
from gateway.frontends.identity import session_owner
from gateway.policy.call import Principal

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"


def owner(principal: Principal) -> object:
    return authorization_context(session_owner(Identity(principal, token=TOKEN)))


def test_two_issuers_alices_and_an_api_keys_alice_own_different_sessions() -> None:
    a = Principal("alice", ("eng",), {}, "jwt", "https://idp-a", "alice")
    b = Principal("alice", ("eng",), {}, "jwt", "https://idp-b", "alice")
    key = Principal("alice", ("eng",))
    owners = [owner(a), owner(b), owner(key)]
    assert len({repr(o) for o in owners}) == 3 and owners[0] != owners[1] != owners[2] != owners[0]
    # a later token of the same (issuer, subject), mapped to other groups, still owns the session
    assert owner(a) == owner(Principal("alice", ("eng", "leads"), {}, "jwt", "https://idp-a", "alice", "c" * 64))
    assert TOKEN not in repr(session_owner(Identity(a, token=TOKEN)).access_token)
