"""One PrincipalSpec for config keys, calls and test suites; only a call's or case's principal may omit its id."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.config.load import check_config
from gateway.config.model import AuthSpec, PrincipalSpec
from gateway.policy.callspec import ANONYMOUS, CallSpec
from gateway.policy.callspec import PrincipalSpec as CallPrincipalSpec
from gateway.testing.suite import SuiteFile


def test_config_and_calls_share_one_principal_spec() -> None:
    assert PrincipalSpec is CallPrincipalSpec
    assert AuthSpec.model_fields["anonymous"].annotation == PrincipalSpec | None


def test_a_call_without_a_principal_is_anonymous() -> None:
    assert CallSpec.model_validate({"tool": "t"}).principal == PrincipalSpec(id=ANONYMOUS)


def test_a_call_principal_without_an_id_is_anonymous() -> None:
    principal = CallSpec.model_validate({"tool": "t", "principal": {"groups": ["g"]}}).principal
    assert principal == PrincipalSpec(id=ANONYMOUS, groups=["g"])
    assert CallSpec.model_validate({"tool": "t", "principal": {"id": "bob"}}).principal == PrincipalSpec(id="bob")
    assert CallSpec.model_validate({"tool": "t", "principal": "bob"}).principal == "bob"


def test_a_suite_principal_without_an_id_is_anonymous() -> None:
    suite = SuiteFile.model_validate({"principals": {"a": {"groups": ["g"]}, "b": {"id": "b"}}})
    assert suite.principals == {"a": PrincipalSpec(id=ANONYMOUS, groups=["g"]), "b": PrincipalSpec(id="b")}


def test_a_call_principal_refuses_unknown_keys() -> None:
    with pytest.raises(ValidationError) as caught:
        CallSpec.model_validate({"tool": "t", "principal": {"grups": ["g"]}})
    assert ("principal", "PrincipalSpec", "grups") in [e["loc"] for e in caught.value.errors()]


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
