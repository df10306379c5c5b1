"""The public surface: exported names are pinned, and every error class has a code and a docstring."""

from __future__ import annotations

import inspect

import pytest

import gateway.core.errors
import gateway.policy
from gateway.core.errors import GatewayError


def test_policy_exports():
    assert gateway.policy.__all__ == [
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


def test_error_exports():
    assert gateway.core.errors.__all__ == [
        "AmbiguousCredentials",
        "ApprovalConflict",
        "ApprovalError",
        "ApprovalForbidden",
        "ApprovalNotFound",
        "AuditChainBroken",
        "AuditLogInUse",
        "AuditStartError",
        "AuditWriteError",
        "CallError",
        "CelCompileError",
        "CelError",
        "CelEvaluationError",
        "ConfigError",
        "CredentialError",
        "EditInvalid",
        "EditNotPossible",
        "EditRefused",
        "GatewayError",
        "InvalidArgumentsError",
        "ItemNotFound",
        "ItemRefusedError",
        "ModelUpstreamError",
        "PolicyLoadError",
        "StoreSchemaError",
        "StoreUnavailable",
        "TestSuiteError",
        "TokenRefused",
        "UnclearUriError",
        "UnknownItemError",
        "UnknownToolError",
        "UpstreamCredentialsError",
        "UpstreamDown",
        "UpstreamError",
        "UpstreamNotReached",
    ]


@pytest.mark.parametrize("module", [gateway.policy, gateway.core.errors])
def test_every_exported_name_exists(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def _error_classes() -> list[type[BaseException]]:
    return [obj for _, obj in inspect.getmembers(gateway.core.errors, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == "gateway.core.errors"]


def test_every_public_error_class_is_exported():
    public = {cls.__name__ for cls in _error_classes() if not cls.__name__.startswith("_")}
    assert public == set(gateway.core.errors.__all__)


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_class_has_a_code_and_a_docstring(cls):
    assert issubclass(cls, GatewayError)
    assert isinstance(cls.__dict__.get("code"), str) or cls.__name__.startswith("_"), "each class sets its own code"
    assert cls.code and cls.code == cls.code.lower()
    assert cls.__doc__ and cls.__doc__.strip() and "\n" not in cls.__doc__.strip(), "a one-line docstring"


def test_error_codes_are_unique():
    codes = [cls.__dict__["code"] for cls in _error_classes() if "code" in cls.__dict__]
    assert len(codes) == len(set(codes))


def test_every_error_class_is_drawn_in_the_module_docstring():
    doc = gateway.core.errors.__doc__ or ""
    for name in gateway.core.errors.__all__:
        assert name in doc, name
