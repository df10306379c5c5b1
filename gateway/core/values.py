"""JSON values at the gateway's edges: which ones it accepts, how it reads and prints them.

A value a policy sees must be exactly the value the tool receives. Both CEL engines take the
JSON types, but not every value of them: cel-expr-python cuts a string at its first U+0000 and
fails on a lone surrogate, neither engine takes an integer outside int64, cel-python recurses
once per level of nesting, and JSON itself has no NaN or Infinity. So one walker checks a value
against one of two profiles:

    Profile.JSON    what JSON can carry exactly: finite numbers, integers of a bounded number of
                    digits, strings (and keys) without lone surrogates, bounded nesting
    Profile.POLICY  what a policy sees exactly, on both engines: JSON, plus integers within int64
                    and no U+0000 in strings or keys

``problem`` names the first value that fails, with its JSON Pointer; ``door_problem`` is the check
every call passes before any policy sees it (its ids and arguments), in the gateway and in
`gateway explain` / `gateway test`, so those never decide a call the gateway would refuse. ``loads`` reads a request
body strictly (no NaN/Infinity, no overflowing numbers); ``printable`` makes any value safe to
write into the audit log; ``text`` turns a value into text the way JSON writes it.
"""

from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any

from gateway.core.limits import MAX_ID_CHARS, MAX_JSON_INTEGER_DIGITS, MAX_VALUE_NESTING

__all__ = ["Profile", "door_problem", "id_problem", "loads", "printable", "problem", "shown_id", "text"]

_INT64 = (-(2**63), 2**63 - 1)
_JSON_INT_LIMIT = 10**MAX_JSON_INTEGER_DIGITS
_LOG10_2 = math.log10(2)


class Profile(Enum):
    """Which values are acceptable: see the module docstring."""

    JSON = "json"
    POLICY = "policy"


def _pointer(parent: str, key: str | int) -> str:
    # Printable even when the key is what is wrong with the value (a lone surrogate).
    step = str(key).replace("~", "~0").replace("/", "~1").encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{parent}/{step}"


def _string_problem(value: str, profile: Profile) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (an unpaired \\ud800-\\udfff), which is not text"
    if profile is Profile.POLICY and "\x00" in value:
        return "holds U+0000 (NUL), which policies cannot see exactly"
    return None


def _scalar_problem(value: Any, profile: Profile) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if profile is Profile.POLICY and not _INT64[0] <= value <= _INT64[1]:
            return "is an integer outside -2^63..2^63-1, which policies cannot see exactly"
        if not -_JSON_INT_LIMIT < value < _JSON_INT_LIMIT:
            return f"is an integer of more than {MAX_JSON_INTEGER_DIGITS} digits"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"is {value!r}, not a finite number (JSON has no NaN or Infinity)"
    if isinstance(value, str):
        return _string_problem(value, profile)
    return f"is a {type(value).__name__}, not a JSON value"


def _acceptable(value: Any, profile: Profile) -> bool:
    """The common case, fast: no pointers built, ASCII strings and small numbers checked inline."""
    policy = profile is Profile.POLICY
    low, high = _INT64 if policy else (-_JSON_INT_LIMIT + 1, _JSON_INT_LIMIT - 1)
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        container, depth = stack.pop()
        if depth >= MAX_VALUE_NESTING:
            return False
        if isinstance(container, dict):
            if not _keys_acceptable(container, profile):
                return False
            items: Any = container.values()
        else:
            items = container
        for item in items:
            kind = type(item)
            if kind is str:
                if (policy and "\x00" in item) or (not item.isascii() and _string_problem(item, profile)):
                    return False
            elif kind is int:
                if not low <= item <= high:
                    return False
            elif kind is float:
                if not math.isfinite(item):
                    return False
            elif kind is dict or kind is list:
                stack.append((item, depth + 1))
            elif item is not None and kind is not bool:
                return False  # a subclass or a foreign type: let the careful walk say what it is
    return True


def _keys_acceptable(mapping: dict[Any, Any], profile: Profile) -> bool:
    """Every key of ``mapping`` is a string ``profile`` accepts (ASCII without NUL passes without a look)."""
    for key in mapping:
        if type(key) is not str:
            return False
        if not (key.isascii() and "\x00" not in key) and _string_problem(key, profile):
            return False
    return True


def problem(value: Any, profile: Profile = Profile.POLICY, *, where: str = "") -> str | None:
    """Why ``value`` is not acceptable under ``profile`` (naming where, as a JSON Pointer), or None.

    Iterative, so that no depth of nesting can exhaust the stack; stops at the first problem.
    """
    if type(value) in (dict, list) and _acceptable(value, profile):
        return None
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, pointer, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_VALUE_NESTING:
                return f"{pointer or '/'} is nested more than {MAX_VALUE_NESTING} levels deep"
            if isinstance(item, dict):
                for key, child in item.items():
                    here = _pointer(pointer, key) if isinstance(key, str) else pointer
                    why = "is not a string key" if not isinstance(key, str) else _string_problem(key, profile)
                    if why is not None:
                        return f"a key at {here} {why}"
                    stack.append((child, here, depth + 1))
            else:
                stack.extend((child, _pointer(pointer, i), depth + 1) for i, child in enumerate(item))
            continue
        why = _scalar_problem(item, profile)
        if why is not None:
            return f"{pointer or '/'} {why}"
    return None


def door_problem(call_id: str, run_id: str, arguments: Any) -> str | None:
    """Why a call cannot go to policies and the tool exactly as given (its ids, then its arguments), or None."""
    for name, value in (("call id", call_id), ("run id", run_id)):
        why = id_problem(name, value)
        if why is not None:
            return why
    return problem(arguments, where="/arguments")


def id_problem(name: str, value: str) -> str | None:
    """Why an id a caller named (``name``: "call id", "run id") is refused at the door, or None.

    An id is at most ``MAX_ID_CHARS`` printable characters (docs/runs.md): it is shown on the approvals
    page, in ``gateway sessions`` and in the audit log, where a newline, an escape sequence or a bidi
    override would forge or hide what an operator reads. The refusal names the character, never echoes it.
    """
    if len(value) > MAX_ID_CHARS:
        return f"the {name} is longer than {MAX_ID_CHARS} characters"
    why = problem(value)
    if why is not None:
        return f"the {name} {why.removeprefix('/ ')}"
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        return f"the {name} holds U+{ord(bad):04X}, a control or other non-printable character"
    return None


def shown_id(value: str) -> str:
    """An id as the audit log and the answer show it: every non-printable character escaped (``\\x85``,
    ``\\u202e``, ``\\ud800``), so a refused id cannot break a log line for a reader that splits on
    Unicode line boundaries (U+0085, U+2028) or hide itself in the text around it."""
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)


def _printable_scalar(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _string_problem(value, Profile.JSON) \
            else value
    if isinstance(value, int) and not isinstance(value, bool) and _scalar_problem(value, Profile.JSON):
        digits = int(abs(value).bit_length() * _LOG10_2) + 1
        return f"[an integer of about {digits} digits]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"[{value!r}]"
    if value is None or isinstance(value, bool | int | float):
        return value
    return f"[{type(value).__name__}]"


def printable(value: Any) -> Any:
    """A copy of ``value`` that any JSON writer takes: every value JSON cannot carry becomes a note.

    For the audit log, so that the record of a refused call cannot fail on what was refused.
    """
    if not isinstance(value, dict | list):
        return _printable_scalar(value)
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any, int]] = [(value, root, 1)]
    while stack:
        source, target, depth = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in pairs:
            if isinstance(child, dict | list):
                copy: Any = ({} if isinstance(child, dict) else []) if depth < MAX_VALUE_NESTING else \
                    f"[nested more than {MAX_VALUE_NESTING} levels deep]"
                if not isinstance(copy, str):
                    stack.append((child, copy, depth + 1))
            else:
                copy = _printable_scalar(child)
            if isinstance(target, dict):
                target[_printable_scalar(key) if isinstance(key, str) else str(key)] = copy
            else:
                target.append(copy)
    return root


def _finite(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"the number {literal[:40]} is too large to be represented")
    return number


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_JSON_INTEGER_DIGITS:
        raise ValueError(f"an integer of {len(literal)} digits is too large (at most {MAX_JSON_INTEGER_DIGITS})")
    return int(literal)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; send finite numbers only")


def loads(body: bytes | str) -> Any:
    """Parse JSON strictly; ``ValueError`` with a clear message for anything JSON does not allow.

    Python's ``json`` reads NaN and Infinity, turns 1e400 into infinity and recurses once per
    level of nesting: each of those is refused here instead.
    """
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded_int)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the body is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def text(value: Any) -> str:
    """A value as text: a string as itself, anything else as compact JSON (``null``, ``{"a":1}``).

    Never Python's ``str()``: that would turn ``None`` into ``None`` and a dict into ``{'a': 1}``.
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
