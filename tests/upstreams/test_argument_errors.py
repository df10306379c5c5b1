"""Arguments that do not fit a tool's input schema, said argument by argument and without their values."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from gateway.upstreams.argument_errors import ArgumentProblem, describe

SCHEMA = {
    "type": "object",
    "required": ["query", "limit"],
    "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "sort": {"enum": ["asc", "desc"]},
        "cursor": {"type": ["string", "null"]},
        "since": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "filters": {"type": "array", "items": {"type": "object", "properties": {"limit": {"type": "integer"}}}},
    },
}


def problems(arguments: dict[str, Any]) -> list[ArgumentProblem]:
    return describe(jsonschema.Draft202012Validator(SCHEMA).iter_errors(arguments))


@pytest.mark.parametrize(("arguments", "text"), [
    ({"query": "q", "limit": "5"}, "argument `limit` must be an integer, got a string"),
    ({"query": "q", "limit": 2.5}, "argument `limit` must be an integer, got a number"),
    ({"query": True, "limit": 5}, "argument `query` must be a string, got a boolean (true or false)"),
    ({"query": "q", "limit": 500}, "argument `limit` must be at most 100"),
    ({"query": "", "limit": 5}, "argument `query` must be at least 1 characters long"),
    ({"query": "q", "limit": 5, "sort": "sideways"}, 'argument `sort` must be one of "asc", "desc"'),
    ({"query": "q", "limit": 5, "cursor": 7}, "argument `cursor` must be a string or null, got an integer"),
    ({"query": "q", "limit": 5, "since": [1]}, "argument `since` must be a string or an integer, got an array"),
    ({"query": "q", "limit": 5, "filters": [{"limit": 1}, {"limit": "x"}]},
     "argument `filters[1].limit` must be an integer, got a string"),
])
def test_a_value_of_the_wrong_kind_names_the_argument_and_what_it_needs(arguments: dict[str, Any],
                                                                        text: str) -> None:
    [problem] = problems(arguments)
    assert problem == ArgumentProblem(text, structural=False)


def test_missing_and_unknown_arguments_are_structural_a_rewrite_may_mend_them() -> None:
    found = problems({"query": "q", "debug": True})
    assert sorted(found, key=lambda p: p.text) == [
        ArgumentProblem("argument `debug` is not accepted by this tool", structural=True),
        ArgumentProblem("argument `limit` is required", structural=True),
    ]


def test_no_value_is_repeated_in_a_message() -> None:
    secret = "123-45-6789"
    found = problems({"query": "q", "limit": secret, "sort": secret, "since": {"ssn": secret}})
    assert len(found) == 3
    assert all(secret not in p.text for p in found)


def test_arguments_that_fit_have_no_problems() -> None:
    assert problems({"query": "q", "limit": 5, "filters": [{"limit": 1}], "cursor": None, "since": 3}) == []
