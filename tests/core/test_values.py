"""gateway/core/values.py on its own: the walker cannot be crashed, and what it prints is always JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.limits import MAX_VALUE_NESTING
from gateway.core.values import Profile, loads, printable, problem, text


def _nested(levels: int) -> Any:
    value: Any = "bottom"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def test_no_depth_of_nesting_exhausts_the_stack():
    deep = _nested(200_000)

    assert "nested more than 64 levels" in (problem(deep) or "")
    json.dumps(printable(deep), allow_nan=False)  # iterative too: no RecursionError, valid JSON


def test_nesting_up_to_the_bound_is_admitted():
    assert problem(_nested(MAX_VALUE_NESTING)) is None
    assert problem(_nested(MAX_VALUE_NESTING + 1)) is not None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 10**1001, "a\ud800", {"\udc00": 1},
                                   [b"bytes"], {1: "int key"}])
def test_printable_makes_anything_json(value):
    json.dumps(printable({"v": value}), allow_nan=False, ensure_ascii=False).encode("utf-8")
    assert problem(printable({"v": value}), Profile.JSON) is None


@pytest.mark.parametrize(("body", "mentions"), [(b'{"a": NaN}', "NaN"), (b'{"a": -Infinity}', "-Infinity"),
                                                (b'{"a": 1e400}', "too large"), (b'[' + b'9' * 1001 + b']', "digits"),
                                                (b'{"a": 1', "not valid JSON"), (b"\xff", "UTF-8")])
def test_loads_refuses_what_json_does_not_allow(body, mentions):
    with pytest.raises(ValueError, match=mentions):
        loads(body)


def test_loads_keeps_ordinary_values():
    assert loads(b'{"a": [1, -2.5, 1e300, "\\u0000", null, true]}') == {"a": [1, -2.5, 1e300, "\x00", None, True]}


@pytest.mark.parametrize(("value", "written"), [(None, "null"), (True, "true"), (2.5, "2.5"), ({"a": 1}, '{"a":1}'),
                                                ([1, None], "[1,null]"), ("as is", "as is")])
def test_text_is_json_style(value, written):
    assert text(value) == written
