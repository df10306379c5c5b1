"""An audit event as bytes: one line of strict JSON, whatever the values, within a size bound.

Whatever an agent sends (NaN, a 5,000-digit integer, a lone surrogate, nesting 900 deep, 100 MB
of text), the line is valid UTF-8 that a strict JSON parser reads, and it is bounded: a value
whose JSON is over ``max_value_bytes`` goes in as a summary, never whole::

    {"truncated": true, "sha256": "<hex of the value's JSON>", "bytes": 104857602, "preview": "{\\"memo\\": \\"aaaa"}

The digest is of the value's compact JSON (UTF-8, ``separators=(",", ":")``), as redacted.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from gateway.core.errors import AuditWriteError
from gateway.core.limits import AUDIT_BOUND_DEPTH, AUDIT_PREVIEW_BYTES, MAX_VALUE_NESTING

__all__ = ["encode_event", "summary"]

# When the line is too long even with every value bounded, fields are summarised with this
# shorter preview, largest first.
_SHRUNK_PREVIEW_BYTES = 64


def encode_event(event: dict[str, Any], max_value_bytes: int, max_event_bytes: int) -> bytes:
    """``event`` as one JSON line (with its newline), every value and the line within bounds."""
    line = dumps(event)
    if len(line) > max_value_bytes:  # only then can a single value be over the bound
        event = {key: _bound(value, max_value_bytes, 0) for key, value in event.items()}
        line = dumps(event)
    if len(line) > max_event_bytes:
        line = _shrink(event, max_event_bytes)
    return line + b"\n"


def dumps(value: Any) -> bytes:
    """Compact strict JSON in UTF-8; values JSON cannot hold are written as text instead."""
    try:
        return _json(value)
    except (ValueError, TypeError, RecursionError):  # NaN, a huge int, a lone surrogate, odd keys, deep
        try:
            return _json(_safe(value, 0))
        except (ValueError, TypeError, RecursionError) as exc:  # not expected: _safe leaves only JSON
            raise AuditWriteError(f"the audit event could not be encoded: {type(exc).__name__}") from exc


def summary(data: bytes, preview_bytes: int = AUDIT_PREVIEW_BYTES) -> dict[str, Any]:
    """What stands in for a value too large to log: its digest, size and the start of its JSON."""
    return {"truncated": True, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "preview": data[:preview_bytes].decode("utf-8", "ignore")}  # "ignore": a character cut in two


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                      default=_text).encode("utf-8")


def _bound(value: Any, limit: int, depth: int) -> Any:
    data = dumps(value)
    if len(data) <= limit:
        return value
    if depth < AUDIT_BOUND_DEPTH and isinstance(value, dict | list):
        # Keep the small members readable; summarise only the ones that are too large.
        inner: Any = {k: _bound(v, limit, depth + 1) for k, v in value.items()} if isinstance(value, dict) \
            else [_bound(v, limit, depth + 1) for v in value]
        if len(dumps(inner)) <= limit:
            return inner
    return summary(data, min(AUDIT_PREVIEW_BYTES, limit // 8))


def _shrink(event: dict[str, Any], limit: int) -> bytes:
    """Summarise the largest fields, one at a time, until the line fits."""
    event = dict(event)
    sizes = sorted(((len(dumps(v)), k) for k, v in event.items()), reverse=True)
    for _, key in sizes:
        value = event[key]
        if isinstance(value, dict) and value.get("truncated") is True and "sha256" in value:
            event[key] = value | {"preview": value.get("preview", "")[:_SHRUNK_PREVIEW_BYTES]}
        else:
            event[key] = summary(dumps(value), _SHRUNK_PREVIEW_BYTES)
        line = dumps(event)
        if len(line) <= limit:
            return line
    raise AuditWriteError("the audit event is too large even with every field summarised")


def _safe(value: Any, depth: int) -> Any:
    """A copy of ``value`` made of what strict JSON holds; anything else becomes descriptive text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _as_text(value)
    if isinstance(value, int):
        try:
            str(value)
            return int(value)
        except ValueError:  # more digits than Python converts to text
            return f"<integer of {abs(value).bit_length()} bits>"
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                          "Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict | list | tuple) and depth >= MAX_VALUE_NESTING:
        return f"<nested deeper than {MAX_VALUE_NESTING} levels>"
    if isinstance(value, dict):
        return {_as_text(k): _safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v, depth + 1) for v in value]
    return _safe(_text(value), depth)


def _as_text(key: Any) -> str:
    """Text that encodes as UTF-8: a lone surrogate stays visible as its escape (``\\udc80``)."""
    text = key if isinstance(key, str) else _text(key)
    return text if _encodable(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # an object whose __str__ fails must not stop the event
        return f"<{type(value).__name__}>"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
