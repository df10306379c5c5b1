"""A quick "these arguments fit" for the common input schemas, so most calls skip the full validator.

Most tools' input schemas are an object of typed properties: strings, numbers, booleans, arrays and
nested objects, with ``required``, ``enum`` and a few bounds. For such a schema ``accepting(schema)``
builds a predicate that walks the arguments once. The predicate answers only "fits": when it is
unsure (a value it does not model, a keyword it does not know) it answers False and the caller runs
the jsonschema validator as before, which also says why. So the answer is never more lenient than
the validator's: every value the predicate accepts, the validator accepts too (tested side by side,
tests/upstreams/test_schema_accept.py). A schema with any keyword outside the small set below gets
no predicate at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["Accepts", "accepting"]

Accepts = Callable[[Any], bool]

# Keywords that only annotate: no effect on whether a value fits (formats are annotations unless the
# validator is given a format checker, and the registry's is not).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "format", "deprecated",
                          "readOnly", "writeOnly", "$schema", "$id", "contentMediaType", "contentEncoding"})
_CHECKED = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum", "const",
                      "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
                      "exclusiveMaximum", "minItems", "maxItems"})
# The drafts whose meaning of the keywords above is the one modelled here (draft 4 has boolean
# exclusive bounds, draft 3 a boolean ``required``).
_DRAFTS = frozenset({"", "http://json-schema.org/draft-06/schema", "http://json-schema.org/draft-07/schema",
                     "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"})
_MAX_DEPTH = 16


class _Unsupported(Exception):
    """The schema uses something the predicate does not model."""


def accepting(schema: Any) -> Accepts | None:
    """A predicate that is True only for values ``schema`` accepts; None when the schema is outside what it
    models (then every value goes to the validator)."""
    if not isinstance(schema, dict) or str(schema.get("$schema", "")).rstrip("#") not in _DRAFTS:
        return None
    try:
        return _build(schema, 0)
    except _Unsupported:
        return None


def _build(schema: Any, depth: int) -> Accepts:
    if schema is True or schema == {}:
        return _anything
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        raise _Unsupported
    unknown = set(schema) - _ANNOTATIONS - _CHECKED
    if unknown or (depth and ("$schema" in schema or "$id" in schema)):
        raise _Unsupported
    checks = [_typed(schema.get("type"))] if "type" in schema else []
    checks += _object_checks(schema, depth) + _string_checks(schema) + _number_checks(schema)
    checks += _array_checks(schema, depth) + _value_checks(schema)
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


def _anything(value: Any) -> bool:
    return True


_TYPES: dict[str, Accepts] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or (type(v) is float and math.isfinite(v)),
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
}


def _typed(kind: Any) -> Accepts:
    names = [kind] if isinstance(kind, str) else kind
    if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
        raise _Unsupported
    tests = [_TYPES[n] for n in names]
    return tests[0] if len(tests) == 1 else (lambda v: any(t(v) for t in tests))


def _object_checks(schema: dict[str, Any], depth: int) -> list[Accepts]:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or \
            not all(isinstance(r, str) for r in required):
        raise _Unsupported
    if not properties and not required and extra is True:
        return []
    each = {name: _build(sub, depth + 1) for name, sub in properties.items()}
    others = None if extra is False else _build(extra, depth + 1)

    def fits(value: Any) -> bool:
        if type(value) is not dict:
            return True  # not an object: ``type`` decides (these keywords apply to objects only)
        for name in required:
            if name not in value:
                return False
        for key, item in value.items():
            test = each.get(key, others)
            if test is None or not test(item):
                return False
        return True
    return [fits]


def _string_checks(schema: dict[str, Any]) -> list[Accepts]:
    low, high, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    if low is None and high is None and pattern is None:
        return []
    if any(b is not None and type(b) is not int for b in (low, high)) or \
            (pattern is not None and not isinstance(pattern, str)):
        raise _Unsupported
    try:
        compiled = re.compile(pattern) if pattern is not None else None
    except re.error:
        raise _Unsupported from None

    def fits(value: Any) -> bool:
        if type(value) is not str:
            return True
        return (low is None or len(value) >= low) and (high is None or len(value) <= high) and \
            (compiled is None or compiled.search(value) is not None)
    return [fits]


def _number_checks(schema: dict[str, Any]) -> list[Accepts]:
    bounds = [(schema.get(k), op) for k, op in (("minimum", "ge"), ("maximum", "le"), ("exclusiveMinimum", "gt"),
                                                   ("exclusiveMaximum", "lt")) if k in schema]
    if not bounds:
        return []
    if any(type(b) not in (int, float) for b, _ in bounds):
        raise _Unsupported

    def fits(value: Any) -> bool:
        if type(value) not in (int, float):
            return True  # not a number (a boolean is not one either): ``type`` decides
        if type(value) is float and not math.isfinite(value):
            return False
        for bound, op in bounds:
            if not ((op == "ge" and value >= bound) or (op == "le" and value <= bound) or
                    (op == "gt" and value > bound) or (op == "lt" and value < bound)):
                return False
        return True
    return [fits]


def _array_checks(schema: dict[str, Any], depth: int) -> list[Accepts]:
    low, high = schema.get("minItems"), schema.get("maxItems")
    items = _build(schema["items"], depth + 1) if "items" in schema else None
    if items is None and low is None and high is None:
        return []
    if any(b is not None and type(b) is not int for b in (low, high)):
        raise _Unsupported

    def fits(value: Any) -> bool:
        if type(value) is not list:
            return True
        return (low is None or len(value) >= low) and (high is None or len(value) <= high) and \
            (items is None or all(items(v) for v in value))
    return [fits]


_PLAIN = (str, int, bool, type(None))


def _value_checks(schema: dict[str, Any]) -> list[Accepts]:
    """``enum`` and ``const`` over plain values, compared with their type (1 is not true, "1" is not 1)."""
    checks: list[Accepts] = []
    for allowed in ([schema["const"]] if "const" in schema else None, schema.get("enum")):
        if allowed is None:
            continue
        if not isinstance(allowed, list) or any(type(a) not in _PLAIN for a in allowed):
            raise _Unsupported
        checks.append(_one_of({(type(a), a) for a in allowed}))
    return checks


def _one_of(keyed: set[tuple[type, Any]]) -> Accepts:
    return lambda value: type(value) in _PLAIN and (type(value), value) in keyed
