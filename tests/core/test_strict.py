"""One strict base for every model of a written document: an unknown key is an error wherever it is written."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest
from pydantic import BaseModel, ValidationError

import gateway.config.auth
import gateway.config.edge
import gateway.config.fields
import gateway.config.model
import gateway.config.observe
import gateway.config.upstreams
import gateway.policy.callspec
import gateway.policy.model
import gateway.testing.suite
from gateway.core.strict import StrictModel

DOCUMENTS = [
    gateway.config.auth, gateway.config.edge, gateway.config.fields, gateway.config.model, gateway.config.observe,
    gateway.config.upstreams, gateway.policy.callspec, gateway.policy.model, gateway.testing.suite,
]
# Not written by anyone: built by the loader around a validated suite.
NOT_WRITTEN = {gateway.testing.suite.LoadedSuite}


def _models(module: ModuleType) -> list[type[BaseModel]]:
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, BaseModel) and obj.__module__ == module.__name__ and obj not in NOT_WRITTEN]


@pytest.mark.parametrize("module", DOCUMENTS, ids=lambda m: m.__name__)
def test_every_model_of_a_written_document_is_strict(module: ModuleType) -> None:
    models = _models(module)
    assert models
    for model in models:
        assert issubclass(model, StrictModel), model
        assert model.model_config.get("extra") == "forbid", model


def test_an_unknown_key_is_refused_by_name() -> None:
    class Thing(StrictModel):
        name: str = "x"

    with pytest.raises(ValidationError) as caught:
        Thing.model_validate({"name": "a", "nmae": "b"})
    (error,) = caught.value.errors()
    assert error["type"] == "extra_forbidden"
    assert error["loc"] == ("nmae",)


def test_enums_stay_enums() -> None:
    # policy models had `use_enum_values=False` spelt out: the shared base keeps pydantic's default
    from gateway.policy.decision import OnError

    assert gateway.policy.model.RuleDefaults.model_validate({"on_error": "ignore"}).on_error is OnError.IGNORE
