"""An identity carries its caller's verified token for exchange, and never shows it."""

from __future__ import annotations

import dataclasses

from gateway.auth.keys import Identity
from gateway.policy.call import Principal

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2VjcmV0LXNpZ25hdHVyZQ"


def test_an_identitys_repr_never_shows_its_token() -> None:
    principal = Principal("alice", ("eng",), {}, "jwt", "https://idp", "alice", "ab" * 32)
    identity = Identity(principal, approver=True, token=TOKEN)
    for shown in (repr(identity), str(identity), repr(dataclasses.replace(identity)), repr([identity])):
        assert TOKEN not in shown and "eyJ" not in shown, shown
    assert "ab" * 32 in repr(identity)  # the hash of its id is what names a token
    assert identity == Identity(principal, approver=True, token="another")  # nor does it make two callers differ
