"""One PrincipalSpec for config keys, extended for calls and test suites: only a call's or case's principal may
omit its id, and only it may say how the caller was recognised (``kind``, ``issuer``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.config.load import check_config
from gateway.config.model import AuthSpec, PrincipalSpec
from gateway.policy.call import Principal
from gateway.policy.callspec import ANONYMOUS, CallPrincipalSpec, CallSpec
from gateway.policy.callspec import PrincipalSpec as CallsPrincipalSpec
from gateway.testing.suite import SuiteFile


def test_config_and_calls_share_one_principal_spec() -> None:
    assert PrincipalSpec is CallsPrincipalSpec and issubclass(CallPrincipalSpec, PrincipalSpec)
    assert AuthSpec.model_fields["anonymous"].annotation == PrincipalSpec | None
    assert "kind" not in PrincipalSpec.model_fields and "issuer" not in PrincipalSpec.model_fields


def test_a_config_key_cannot_say_it_is_a_token() -> None:
    with pytest.raises(ValidationError) as caught:
        AuthSpec.model_validate({"api_keys": [{"principal": {"id": "a", "kind": "jwt", "issuer": "https://i"},
                                               "sha256": "0" * 64}]})
    assert {e["loc"][-1] for e in caught.value.errors()} == {"kind", "issuer"}


def test_a_call_without_a_principal_is_anonymous() -> None:
    principal = CallSpec.model_validate({"tool": "t"}).principal
    assert principal == CallPrincipalSpec(id=ANONYMOUS, kind="anonymous")


def test_a_call_principal_without_an_id_is_anonymous() -> None:
    principal = CallSpec.model_validate({"tool": "t", "principal": {"groups": ["g"]}}).principal
    assert principal == CallPrincipalSpec(id=ANONYMOUS, groups=["g"], kind="anonymous")
    bob = CallSpec.model_validate({"tool": "t", "principal": {"id": "bob"}}).principal
    assert bob == CallPrincipalSpec(id="bob", kind="key")
    assert CallSpec.model_validate({"tool": "t", "principal": "bob"}).principal == "bob"


def test_a_suite_principal_without_an_id_is_anonymous() -> None:
    suite = SuiteFile.model_validate({"principals": {"a": {"groups": ["g"]}, "b": {"id": "b"}}})
    assert suite.principals == {"a": CallPrincipalSpec(id=ANONYMOUS, groups=["g"], kind="anonymous"),
                                "b": CallPrincipalSpec(id="b")}


def test_a_call_principal_refuses_unknown_keys() -> None:
    with pytest.raises(ValidationError) as caught:
        CallSpec.model_validate({"tool": "t", "principal": {"grups": ["g"]}})
    assert ("principal", "CallPrincipalSpec", "grups") in [e["loc"] for e in caught.value.errors()]


def test_a_token_principal_of_a_call_names_its_issuer_and_is_bound_by_it() -> None:
    call = CallSpec.model_validate({"tool": "t", "principal": {"id": "alice", "kind": "jwt",
                                                                "issuer": "https://idp.example.com"}}).to_call()
    assert call.principal == Principal("alice", (), {}, "jwt", "https://idp.example.com", "alice")
    assert call.principal.to_cel()["issuer"] == "https://idp.example.com"
    for bad in ({"id": "a", "kind": "jwt"}, {"id": "a", "issuer": "https://i"},
                {"id": "a", "kind": "anonymous", "issuer": "https://i"}, {"id": "a", "kind": "oauth"}):
        with pytest.raises(ValidationError):
            CallSpec.model_validate({"tool": "t", "principal": bad})


def test_a_principal_written_alone_must_name_its_id() -> None:
    with pytest.raises(ValidationError) as caught:
        PrincipalSpec.model_validate({"groups": ["g"]})
    assert [(e["type"], e["loc"]) for e in caught.value.errors()] == [("missing", ("id",))]


@pytest.mark.parametrize("auth, where", [
    ("auth:\n  anonymous: {groups: [g]}\n", "auth.anonymous.id"),
    ("auth:\n  api_keys:\n    - principal: {groups: [g]}\n      sha256: '" + "0" * 64 + "'\n",
     "auth.api_keys.0.principal.id"),
])
def test_a_config_principal_must_name_its_id(tmp_path: Path, auth: str, where: str) -> None:
    file = tmp_path / "gateway.yaml"
    file.write_text(auth)
    config, diagnostics = check_config(file)
    assert config is None
    assert [(d.code, d.message, d.hint) for d in diagnostics] == [
        ("missing-key", f"missing required key {where!r}", "add 'id' here")]
