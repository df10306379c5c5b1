"""Why a call's arguments do not fit its tool's input schema, said so the model can fix its call.

Each problem names the argument by its path (``filters[0].limit``) and what the schema asks of it
("must be an integer, got a string"), never the value itself: the text goes to the model, to the audit
log's ``message`` and to the gateway's log, where a value would be outside redaction.

A problem is *structural* when a request-stage rewrite (``set``, ``remove``) is the usual way to mend it:
a required argument missing, or one the schema does not accept. The pipeline checks the values the
caller sent before policies read them, and leaves structural problems to the check of the final
arguments after the rewrites (gateway/pipeline/lifecycle.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.limits import ARGUMENT_NAME_CHARS, SCHEMA_VALUE_CHARS

__all__ = ["ArgumentProblem", "describe"]

# Problems of the object's shape, mended by a rewrite rather than by the model's values.
_STRUCTURAL = frozenset({"required", "additionalProperties", "unevaluatedProperties", "dependentRequired",
                         "dependencies", "minProperties", "maxProperties", "propertyNames"})

_A = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean (true or false)",
      "array": "an array", "object": "an object", "null": "null"}


@dataclass(frozen=True, slots=True)
class ArgumentProblem:
    """One argument that does not fit, and what the schema asks of it."""

    text: str
    structural: bool


def describe(errors: Iterable[Any]) -> list[ArgumentProblem]:
    """The problems of jsonschema's validation errors, in argument order, each said once."""
    seen: dict[str, ArgumentProblem] = {}
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        structural = error.validator in _STRUCTURAL
        for text in _texts(error):
            seen.setdefault(text, ArgumentProblem(text, structural))
    return list(seen.values())


def _texts(error: Any) -> list[str]:
    path = list(error.absolute_path)
    keyword, wanted, instance = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(instance, dict):
        return [f"argument {_name([*path, n])} is required" for n in wanted if n not in instance]
    if keyword in ("additionalProperties", "unevaluatedProperties") and isinstance(instance, dict):
        return [f"argument {_name([*path, k])} is not accepted by this tool" for k in _extra(error.schema, instance)]
    return [f"argument {_name(path)} {_what(keyword, wanted, instance, error.context or [])}"]


def _what(keyword: str, wanted: Any, instance: Any, context: Sequence[Any]) -> str:
    """What the schema's ``keyword`` asks of the value, for a message."""
    if keyword == "type":
        return f"must be {_types(wanted)}, got {_A[_json_type(instance)]}"
    if keyword in ("anyOf", "oneOf"):
        alternatives = [e.validator_value for e in context if e.validator == "type" and not e.path]
        if alternatives and len(alternatives) == len(context):
            return f"must be {_types([t for a in alternatives for t in _listed(a)])}, got {_A[_json_type(instance)]}"
        return "does not match any of the forms the tool accepts" if keyword == "anyOf" else \
            "must match exactly one of the forms the tool accepts"
    plain = _PLAIN.get(keyword)
    if plain is not None:
        return plain.format(_shown(wanted))
    return f"does not meet the input schema's {keyword!r}"


_PLAIN = {
    "enum": "must be one of {}", "const": "must be {}",
    "minimum": "must be at least {}", "maximum": "must be at most {}",
    "exclusiveMinimum": "must be greater than {}", "exclusiveMaximum": "must be less than {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} characters long", "maxLength": "must be at most {} characters long",
    "minItems": "must have at least {} items", "maxItems": "must have at most {} items",
    "uniqueItems": "must not repeat an item", "pattern": "must match the pattern {}", "format": "must be a valid {}",
    "contains": "must contain an item that fits the schema", "not": "has a form the tool does not accept",
}


def _listed(types: Any) -> list[str]:
    return [types] if isinstance(types, str) else [t for t in types if isinstance(t, str)]


def _types(types: Any) -> str:
    names = list(dict.fromkeys(_listed(types)))
    return " or ".join(_A.get(t, repr(t)) for t in names) or "of another type"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _extra(schema: Any, instance: dict[str, Any]) -> list[str]:
    """The keys of ``instance`` the object schema neither names nor matches by a pattern."""
    named = schema.get("properties", {}) if isinstance(schema, dict) else {}
    patterns = list(schema.get("patternProperties", {})) if isinstance(schema, dict) else []
    return [k for k in instance if k not in named and not any(re.search(p, k) for p in patterns)]


def _name(path: Sequence[Any]) -> str:
    """An argument's path as a model would write it: ``filters[0].limit``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = str(part)
            key = key if len(key) <= ARGUMENT_NAME_CHARS else key[:ARGUMENT_NAME_CHARS] + "…"
            out += f".{key}" if out else key
    return f"`{out}`" if out else "(the arguments object)"


def _shown(value: Any) -> str:
    """A value the schema gives, as JSON, cut to a readable length."""
    if isinstance(value, list):
        text = ", ".join(json.dumps(v, ensure_ascii=False, default=str) for v in value)
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SCHEMA_VALUE_CHARS else text[:SCHEMA_VALUE_CHARS] + "…"
