"""The CEL front end's signature table: every operator and function the checker types, declared once.

Only static types live here (no engine is imported), so the typed checker that loading runs on
every engine reads it without the cel-python runtime. That runtime (``pure_signatures``) gives
each overload it can run an implementation, keyed by name and parameter types; an overload
without one type-checks and then fails at run time, as cel-cpp's ``int(duration)`` does.

A type is a name ("int", "dyn", type variables "A"/"B") or ("list", T), ("map", K, V), ("type", T).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway.policy.cel import strings
from gateway.policy.cel.functions import FUNCTIONS, RECEIVER_FUNCTIONS
from gateway.policy.cel.types import TYPE_VARIABLES

__all__ = ["BOOL", "CONVERSIONS", "CPP_ONLY", "DURATION_PARTS", "DYN", "GATEWAY_KINDS", "SIGNATURES", "TIME_PARTS",
           "TYPE_NAMES", "TYPE_VARIABLES", "Overload"]

DYN, BOOL = "dyn", "bool"
_LIST, _MAP = ("list", "A"), ("map", "A", "B")
TYPE_NAMES: dict[str, Any] = {
    **{n: n for n in ("int", "uint", "double", "string", "bytes", "bool", "null_type")},
    "list": ("list", DYN), "map": ("map", DYN, DYN), "type": ("type", DYN),
}
# The gateway functions' parameter and result kinds (functions.FUNCTIONS) as types.
GATEWAY_KINDS: dict[str, Any] = {"string": "string", "bool": "bool", "map": ("map", "string", DYN),
                                  "list": ("list", "string")}
# Timestamp accessors (each also takes a time zone) and the duration accessors among them.
TIME_PARTS = ("getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
              "getHours", "getMinutes", "getSeconds", "getMilliseconds")
DURATION_PARTS = ("getHours", "getMinutes", "getSeconds", "getMilliseconds")
# Conversions: target -> the kinds it converts from.
CONVERSIONS: dict[str, tuple[str, ...]] = {
    "int": ("int", "uint", "double", "string", "timestamp"),
    "uint": ("int", "uint", "double", "string"),
    "double": ("int", "uint", "double", "string"),
    "string": ("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"),
    "bool": ("bool", "string"),
    "bytes": ("bytes", "string"),
    "timestamp": ("string", "timestamp", "int"),
    "duration": ("string", "duration"),
}


class Overload(NamedTuple):
    """One overload of an operator or function: its static types and how it may be called."""

    params: tuple[Any, ...]
    result: Any
    member: bool  # callable as receiver.name(...)
    plain: bool  # callable as name(...)


SIGNATURES: dict[str, list[Overload]] = {}
# What only the C++ engine runs (its strings extension): the front end types them for the facts it
# takes from every expression, while the cel-python engine's own check still refuses them.
CPP_ONLY: dict[str, list[Overload]] = {
    "strings.quote": [Overload(("string",), "string", member=False, plain=True)],
    "format": [Overload(("string", ("list", DYN)), "string", member=True, plain=False)],
}


def _declare(name: str, style: str, params: tuple[Any, ...], result: Any) -> None:
    SIGNATURES.setdefault(name, []).append(Overload(params, result, "m" in style, "g" in style))


def _declare_operators() -> None:
    for op in ("_+_", "_-_", "_*_", "_/_", "_%_"):
        for kind in ("int", "uint") + (("double",) if op != "_%_" else ()):
            _declare(op, "g", (kind, kind), kind)
    for joined in ("string", "bytes", _LIST):
        _declare("_+_", "g", (joined, joined), joined)
    _declare("_+_", "g", ("timestamp", "duration"), "timestamp")
    _declare("_+_", "g", ("duration", "timestamp"), "timestamp")
    _declare("_+_", "g", ("duration", "duration"), "duration")
    _declare("_-_", "g", ("timestamp", "timestamp"), "duration")
    _declare("_-_", "g", ("timestamp", "duration"), "timestamp")
    _declare("_-_", "g", ("duration", "duration"), "duration")
    _declare("-_", "g", ("int",), "int")
    _declare("-_", "g", ("double",), "double")
    _declare("!_", "g", ("bool",), "bool")
    for op in ("_&&_", "_||_"):
        _declare(op, "g", ("bool", "bool"), "bool")
    for op in ("_<_", "_<=_", "_>_", "_>=_"):
        for kind in ("bool", "int", "uint", "double", "string", "bytes", "timestamp", "duration"):
            _declare(op, "g", (kind, kind), "bool")
    for op in ("_==_", "_!=_"):
        _declare(op, "g", ("A", "A"), "bool")
    _declare("@in", "g", ("A", _LIST), "bool")
    _declare("@in", "g", ("A", _MAP), "bool")
    _declare("_[_]", "g", (_LIST, "int"), "A")
    _declare("_[_]", "g", (_MAP, "A"), "B")
    _declare("_?_:_", "g", ("bool", "A", "A"), "A")


def _declare_functions() -> None:
    _declare("dyn", "g", ("A",), DYN)
    # cel-cpp declares these two but has no run-time overload: they type-check, then fail.
    _declare("int", "g", ("duration",), "int")
    _declare("duration", "g", ("int",), "duration")
    _declare("type", "g", ("A",), ("type", "A"))
    for sized in ("string", "bytes", _LIST, _MAP):
        _declare("size", "gm", (sized,), "int")
    for name in ("contains", "startsWith", "endsWith"):
        _declare(name, "m", ("string", "string"), "bool")
    _declare("matches", "gm", ("string", "string"), "bool")
    for target, sources in CONVERSIONS.items():
        for source in sources:
            _declare(target, "g", (source,), target)
    for name in TIME_PARTS:
        _declare(name, "m", ("timestamp",), "int")
        _declare(name, "m", ("timestamp", "string"), "int")
    for name in DURATION_PARTS:
        _declare(name, "m", ("duration",), "int")
    for name, (_, params, result) in FUNCTIONS.items():
        style = "gm" if name in RECEIVER_FUNCTIONS else "g"
        _declare(name, style, tuple(GATEWAY_KINDS[p] for p in params), GATEWAY_KINDS[result])
    for name, overloads in strings.STRING_EXTENSION.items():
        for params, result, _ in overloads:
            _declare(name, "m", params, result)


_declare_operators()
_declare_functions()
