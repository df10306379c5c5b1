"""The quick "fits" (gateway/upstreams/schema_accept.py) never accepts what the jsonschema validator refuses.

Generated schemas over the keywords it models, and generated values, each checked by both: a value the
predicate accepts has no validator error. And it is useful: for values made to fit it says so."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.upstreams.schema_accept import accepting

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-5, 5), st.just(float("nan")),
                     st.sampled_from([float("inf"), 1.0, 0.0, -0.0]), st.text(max_size=4))
values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), inner, max_size=4)),
    max_leaves=12)

_types = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "type": st.one_of(_types, st.lists(_types, min_size=1, max_size=3, unique=True)),
        "minLength": st.integers(0, 3), "maxLength": st.integers(0, 3),
        "pattern": st.sampled_from(["^a", "b", "[0-9]"]),
        "minimum": st.integers(-3, 3), "maximum": st.floats(-3, 3), "exclusiveMinimum": st.integers(-3, 3),
        "exclusiveMaximum": st.integers(-3, 3), "enum": st.lists(_scalars.filter(lambda v: type(v) is not float),
                                                                  min_size=1, max_size=3),
        "const": st.sampled_from([1, True, "a", None]), "description": st.text(max_size=3),
        "format": st.sampled_from(["email", "date-time", "uri"])})


schemas = st.recursive(_leaf(), lambda inner: st.one_of(
    st.fixed_dictionaries({"type": st.just("object")}, optional={
        "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
        "required": st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3, unique=True),
        "additionalProperties": st.one_of(st.booleans(), inner)}),
    st.fixed_dictionaries({"type": st.just("array")}, optional={
        "items": inner, "minItems": st.integers(0, 2), "maxItems": st.integers(0, 3)})), max_leaves=6)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, value=values)
def test_a_value_the_predicate_accepts_has_no_validator_error(schema: dict[str, Any], value: Any) -> None:
    accepts = accepting(schema)
    assert accepts is not None  # every generated schema is within what it models
    if accepts(value):
        errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]
        assert errors == [], (schema, value)


TOOL = {"type": "object", "properties": {
    "service": {"type": "string", "enum": ["api", "web"]}, "replicas": {"type": "integer", "minimum": 1},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}},
    "dry_run": {"type": "boolean", "description": "only plan"},
    "meta": {"type": "object", "additionalProperties": {"type": "string"}}},
    "required": ["service"], "additionalProperties": False}


@pytest.mark.parametrize(("value", "fits"), [
    ({"service": "api"}, True),
    ({"service": "web", "replicas": 3, "tags": ["a", "b"], "dry_run": False, "meta": {"k": "v"}}, True),
    ({"service": "db"}, False),  # not in the enum
    ({"replicas": 3}, False),  # required missing
    ({"service": "api", "replicas": 0}, False),  # below the minimum
    ({"service": "api", "replicas": True}, False),  # a boolean is not an integer
    ({"service": "api", "replicas": 2.0}, False),  # the validator accepts it; the predicate defers to it
    ({"service": "api", "tags": ["x" * 9]}, False),
    ({"service": "api", "other": 1}, False),  # additionalProperties: false
    ({"service": "api", "meta": {"k": 1}}, False),
])
def test_a_typical_tool_schema_is_accepted_quickly_when_it_fits(value: dict[str, Any], fits: bool) -> None:
    accepts = accepting(TOOL)
    assert accepts is not None
    assert accepts(value) is fits
    if fits:
        assert list(jsonschema.Draft202012Validator(TOOL).iter_errors(value)) == []


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
    {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
    {"type": "array", "items": [{"type": "string"}]},
    {"type": "object", "properties": {"a": {"$schema": "http://json-schema.org/draft-04/schema#"}}},
])
def test_a_schema_outside_the_modelled_keywords_gets_no_predicate(schema: dict[str, Any]) -> None:
    assert accepting(schema) is None
