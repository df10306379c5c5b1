"""The redactor's fast path (issue 12): a value with nothing to redact is passed on as it is, and
one secret anywhere still gets the full redacted copy, the original left untouched."""

from __future__ import annotations

import copy

from gateway.core.limits import REDACTED
from gateway.pipeline.audit import Redactor

_REDACTOR = Redactor(["password", "api_key"], [r"AKIA[0-9A-Z]{16}"])


def test_nothing_to_redact_returns_the_value_itself_and_no_pointers():
    value = {"text": "hello", "items": [{"name": "a", "n": 1}, ["deep", {"k": None}]], "flag": True}
    out, found = _REDACTOR.apply(value, "/args")
    assert out is value
    assert found == []


def test_a_secret_key_deep_in_a_list_still_gets_a_redacted_copy():
    value = {"items": [{"name": "a"}, {"nested": [{"API_KEY": "k-123"}]}]}
    before = copy.deepcopy(value)
    out, found = _REDACTOR.apply(value, "/args")
    assert out == {"items": [{"name": "a"}, {"nested": [{"API_KEY": REDACTED}]}]}
    assert found == ["/args/items/1/nested/0/API_KEY"]
    assert value == before  # the caller's value is never changed


def test_a_pattern_inside_one_string_still_gets_a_redacted_copy():
    value = {"a": ["x", "y"], "b": {"c": "key AKIA0123456789ABCDEF here"}}
    out, found = _REDACTOR.apply(value, "")
    assert out == {"a": ["x", "y"], "b": {"c": f"key {REDACTED} here"}}
    assert found == ["/b/c"]
    assert value["b"]["c"] == "key AKIA0123456789ABCDEF here"


def test_keys_that_are_not_strings_are_matched_as_text():
    out, found = Redactor(["7"], []).apply({7: "seven", "8": "eight"}, "")
    assert out == {7: REDACTED, "8": "eight"}
    assert found == ["/7"]
