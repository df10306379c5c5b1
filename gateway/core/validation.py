"""Turn pydantic validation errors into positioned diagnostics with a hint."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.core.diagnostics import Diagnostic
from gateway.core.sourcemap import Path, YamlDocument

__all__ = ["validate_document"]

RuleOf = Callable[[Path], str | None]
M = TypeVar("M", bound=BaseModel)


def validate_document(
    model: type[M], doc: YamlDocument, rule_of: RuleOf | None = None
) -> tuple[M | None, list[Diagnostic]]:
    """Validate a YAML document against ``model``; every error names file:line:col and a hint."""
    if not isinstance(doc.data, dict):
        return None, [Diagnostic(
            "wrong-type", "the file must be a mapping at the top level", doc.file,
            hint=f"start with the keys of a {model.__name__}",
        )]
    try:
        return model.model_validate(doc.data), []
    except ValidationError as exc:
        return None, [_diagnostic(model, doc, err, rule_of) for err in exc.errors()]


def _diagnostic(model: type[BaseModel], doc: YamlDocument, err: Any, rule_of: RuleOf | None) -> Diagnostic:
    loc: Path = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
    kind = err["type"]
    rule = rule_of(loc) if rule_of else None
    dotted = ".".join(str(p) for p in loc) or "(top level)"
    if kind == "extra_forbidden":
        pos = doc.position(loc, key=True)
        allowed = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"allowed keys here: {', '.join(sorted(allowed))}"
        return Diagnostic("unknown-key", f"unknown key {dotted!r}", doc.file, pos.line, pos.column, rule, hint)
    if kind == "missing":
        pos = doc.position(loc[:-1])
        return Diagnostic("missing-key", f"missing required key {dotted!r}", doc.file, pos.line, pos.column,
                          rule, f"add {loc[-1]!r} here")
    pos = doc.position(loc)
    code = "wrong-type" if kind.endswith("_type") or kind in ("model_type", "dict_type", "list_type") \
        else "invalid-value"
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
    return Diagnostic(code, f"{dotted}: {err['msg']}{shown}", doc.file, pos.line, pos.column, rule, _hint(err))


def _hint(err: Any) -> str | None:
    expected = (err.get("ctx") or {}).get("expected")
    if expected:
        return f"use one of {expected}"
    if err["type"] == "string_pattern_mismatch":
        pattern = str((err.get("ctx") or {}).get("pattern", ""))
        if pattern.startswith("^https?://"):
            return "write an absolute http:// or https:// URL"
        if pattern.startswith("^[A-Za-z0-9][A-Za-z0-9_.-]"):
            return "use letters, digits, '-', '_' or '.', starting with a letter or digit"
        return f"the value must match {pattern}"
    if err["type"] == "string_type":
        return "quote the value so YAML reads it as a string"
    return None


def _fields_at(model: type[BaseModel], loc: Path) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = _model_in(field.annotation)
        if current is None:
            return []
    return list(getattr(current, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
