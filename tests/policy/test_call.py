"""The engine's call input: the principal (its binding key, what CEL sees of it, how the decision log writes it)
and the tool's text as policies read it."""

from __future__ import annotations

import itertools
from urllib.parse import unquote

import pytest

from gateway.policy.call import JWT_KEY_PREFIX, Principal, ToolInfo
from gateway.policy.cel import ExprType, get_engine


def token(issuer: str, subject: str) -> Principal:
    return Principal("same-id", ("g",), {}, "jwt", issuer, subject, "f" * 64)


def test_an_api_key_or_anonymous_principal_is_bound_by_its_id_as_before() -> None:
    assert Principal("alice").key == "alice"
    assert Principal("guest", kind="anonymous").key == "guest"
    # what a key principal was keyed by before tokens existed, so stored rows stay its own
    assert Principal("jwt-looking", kind="key", issuer="ignored", subject="ignored").key == "jwt-looking"


# Pairs a naive "issuer:subject" or "issuer/subject" join would make equal.
CONFUSABLE = [("https://a.example", "b:c"), ("https://a.example:b", "c"), ("https://a.example/b", "c"),
              ("https://a.example", "b/c"), ("https://a.example", ""), ("", "https://a.example"),
              ("https://a.example%3Ab", "c"), ("https://a.example", "%3Ab:c"), ("https://A.example", "b:c")]


def test_a_tokens_key_tells_every_issuer_and_subject_apart() -> None:
    keys = {token(i, s).key for i, s in CONFUSABLE}
    assert len(keys) == len(CONFUSABLE)
    for (issuer, subject) in CONFUSABLE:
        key = token(issuer, subject).key
        assert key.startswith(JWT_KEY_PREFIX) and "/" not in key  # the admin API names it in a URL path
        encoded_issuer, encoded_subject = key.removeprefix(JWT_KEY_PREFIX).split(":")  # exactly one separator
        assert (unquote(encoded_issuer), unquote(encoded_subject)) == (issuer, subject)


def test_a_tokens_key_depends_on_issuer_and_subject_only() -> None:
    a = Principal("alice", ("eng",), {"x": 1}, "jwt", "https://idp", "u-1", "1" * 64)
    b = Principal("someone-else", (), {}, "jwt", "https://idp", "u-1", "2" * 64)  # a later token, remapped id
    assert a.key == b.key == "jwt:https%3A%2F%2Fidp:u-1"


@pytest.mark.parametrize(("kind", "issuer"), [("key", ""), ("anonymous", ""), ("jwt", "https://idp")])
def test_cel_sees_kind_and_issuer(kind: str, issuer: str) -> None:
    cel = Principal("p", ("g",), {"c": 1}, kind, issuer, "s" if issuer else "", "h" * 64 if issuer else "").to_cel()
    assert cel == {"id": "p", "groups": ["g"], "claims": {"c": 1}, "issuer": issuer, "kind": kind}


def test_the_record_carries_who_and_how_but_never_a_token_and_reads_back() -> None:
    jwt = Principal("alice", ("eng",), {"email": "a@x"}, "jwt", "https://idp", "u-1", "ab" * 32)
    assert jwt.to_record() == {"id": "alice", "groups": ["eng"], "kind": "jwt", "issuer": "https://idp",
                               "subject": "u-1", "token_id_hash": "ab" * 32}
    assert Principal.from_record(jwt.to_record(), {"email": "a@x"}) == jwt
    no_jti = Principal("alice", (), {}, "jwt", "https://idp", "u-1")
    assert "token_id_hash" not in no_jti.to_record()
    for p in (Principal("bob", ("ops",)), Principal("guest", (), {}, "anonymous")):
        assert set(p.to_record()) == {"id", "groups", "kind"}
        assert Principal.from_record(p.to_record()) == p


def test_a_record_from_before_kinds_reads_as_an_api_key_bound_as_before() -> None:
    old = Principal.from_record({"id": "bob", "groups": ["ops"]})
    assert (old.kind, old.key, old.issuer) == ("key", "bob", "")
    forged = Principal.from_record({"id": "bob", "groups": [], "kind": "root"})  # an unknown kind is not trusted
    assert forged.kind == "key"


def test_keys_of_many_subjects_never_collide() -> None:
    issuers = ["https://a", "https://a:", "https://a/", "http://a", ""]
    subjects = ["x", ":x", "x:", "/x", "%3Ax", ""]
    pairs = list(itertools.product(issuers, subjects))
    assert len({token(i, s).key for i, s in pairs}) == len(pairs)


# --- the tool ------------------------------------------------------------------------------------


@pytest.mark.both_engines
def test_text_after_a_nul_in_a_tools_text_is_seen_by_policies_on_both_engines(engine: str) -> None:
    # cel-expr-python ends a string at U+0000: what follows would reach the model and not the policy
    tool = ToolInfo("t", title="T\x00<IMPORTANT>", description="Adds.\x00<IMPORTANT>", schema_text="x\x00<IMPORTANT>")
    cel = get_engine(engine)
    program = cel.compile('[tool.title, tool.description, tool.schema_text].all(t, t.contains("<IMPORTANT>"))',
                          ExprType.BOOL)
    assert program.evaluate(cel.activation({"tool": tool.to_cel()})) is True
    assert tool.to_cel()["description"] == "Adds.\ufffd<IMPORTANT>"
    assert ToolInfo("t", description="plain").to_cel()["description"] == "plain"
