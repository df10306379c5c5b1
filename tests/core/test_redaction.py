"""The one redaction walk (gateway/core/redaction.py), as the audit log, approvals and a policy's
``rewrite.redact`` use it: what is replaced, the pointers, any depth, and the input never changed."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.limits import REDACTED
from gateway.core.redaction import Redaction
from gateway.pipeline.audit import Redactor
from gateway.policy.rewrite import redact

KEY = re.compile(r"AKIA[0-9A-Z]{16}")
WALK = Redaction(["Password", "api_key"], [KEY])


def test_keys_without_case_and_patterns_in_strings() -> None:
    value = {"user": "ann", "PASSWORD": {"deep": "x"}, "note": ["key AKIA0123456789ABCDEF here", 7, None]}
    out, found = WALK.apply(value, "/args")
    assert out == {"user": "ann", "PASSWORD": REDACTED, "note": [f"key {REDACTED} here", 7, None]}
    assert found == ["/args/PASSWORD", "/args/note/0"]  # document order


def test_pointers_escape_slash_and_tilde_and_name_the_root() -> None:
    out, found = Redaction(["a/b", "c~d"], [KEY]).apply({"a/b": 1, "c~d": 2})
    assert out == {"a/b": REDACTED, "c~d": REDACTED} and found == ["/a~1b", "/c~0d"]
    assert Redaction((), [KEY]).apply("AKIA0123456789ABCDEF") == (REDACTED, ["/"])


def test_found_is_appended_to() -> None:
    found = ["/before"]
    WALK.apply({"api_key": 1}, "/x", found)
    assert found == ["/before", "/x/api_key"]


def test_nothing_to_redact_gives_the_value_itself() -> None:
    value = {"a": [1, {"b": "plain"}]}
    assert WALK.apply(value) == (value, []) and WALK.apply(value)[0] is value
    assert WALK.finds(value) is False and WALK.finds({"x": [{"API_KEY": 1}]}) is True


def test_the_input_is_never_changed() -> None:
    value = {"a": [{"password": "p"}, "AKIA0123456789ABCDEF"], "b": {"c": 1}}
    before = copy.deepcopy(value)
    out = WALK(value)
    assert value == before and out["b"] is not value["b"]  # a redacted value is a copy throughout


def test_any_depth() -> None:
    value: Any = {"api_key": "k"}
    for level in range(50_000):
        value = [value] if level % 2 else {"n": value}
    out, found = WALK.apply(value)
    while isinstance(out, (dict, list)) and "api_key" not in out:
        out = out[0] if isinstance(out, list) else out["n"]
    assert out == {"api_key": REDACTED} and len(found) == 1 and found[0].endswith("/api_key")


def test_the_audit_redactor_and_rewrite_redact_are_this_walk() -> None:
    value = {"Api_Key": "k", "t": "AKIA0123456789ABCDEF"}
    assert Redactor(["api_key"], [KEY.pattern]).apply(value, "/a") == \
        Redaction(["api_key"], [KEY]).apply(value, "/a")
    assert redact(value, [KEY]) == Redaction((), [KEY])(value) == {"Api_Key": "k", "t": REDACTED}  # no keys


# What rewrite.redact returned before it used the shared walk (a full copy, patterns only).
def _former_rewrite_redact(value: Any, patterns: list[re.Pattern[str]]) -> Any:
    if isinstance(value, str):
        for pattern in patterns:
            value = pattern.sub(REDACTED, value)
        return value
    if isinstance(value, dict):
        return {key: _former_rewrite_redact(child, patterns) for key, child in value.items()}
    if isinstance(value, list):
        return [_former_rewrite_redact(child, patterns) for child in value]
    return value


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet="ab-sk_AKIA0123456789", max_size=24),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=20)


@given(JSON)
def test_rewrite_redact_gives_what_it_gave_before(value: Any) -> None:
    patterns = [re.compile(r"sk-\w+"), re.compile(r"a{2,}")]
    before = copy.deepcopy(value)
    out = redact(value, patterns)
    assert json.dumps(out) == json.dumps(_former_rewrite_redact(value, patterns))  # key order included
    assert value == before


def test_exports() -> None:
    import gateway.core.redaction

    assert gateway.core.redaction.__all__ == ["Redaction"]
