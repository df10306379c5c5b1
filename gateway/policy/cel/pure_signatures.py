"""The signature table of the cel-python engine: every operator and function, declared once.

The checker types calls with ``SIGNATURES`` at compile time and ``runtime_functions()`` dispatches
the same overloads at run time, with cel-cpp's semantics: arithmetic needs both operands of one
type, ints overflow, conversions and the strings extension fail as evaluation errors.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, cast

from celpy.celtypes import DoubleType, DurationType, IntType, TimestampType, UintType
from celpy.evaluation import CELEvalError, Result

from gateway.policy.cel import strings
from gateway.policy.cel.functions import FUNCTIONS
from gateway.policy.cel.pure_values import (
    CelType,
    first_error,
    kind_of,
    no_overload,
    operator_functions,
    to_cel,
    to_plain,
)
from gateway.policy.cel.regex import matches
from gateway.policy.cel.strings import INT64_MAX, INT64_MIN, UINT64_MAX
from gateway.policy.cel.types import TYPE_VARIABLES

__all__ = [
    "BOOL",
    "DYN",
    "SIGNATURES",
    "TYPE_NAMES",
    "TYPE_VALUES",
    "TYPE_VARIABLES",
    "Overload",
    "runtime_functions",
]

# --- static types: a name ("int", "dyn", type variables "A"/"B") or ("list", T), ("map", K, V),
# ("type", T). The same table types calls at compile time and dispatches them at run time.

DYN, BOOL = "dyn", "bool"
_LIST, _MAP = ("list", "A"), ("map", "A", "B")
TYPE_NAMES: dict[str, Any] = {
    **{n: n for n in ("int", "uint", "double", "string", "bytes", "bool", "null_type")},
    "list": ("list", DYN), "map": ("map", DYN, DYN), "type": ("type", DYN),
}
# The value of type(x) or of the identifier ``int``, by kind.
TYPE_VALUES = {kind: CelType(kind) for kind in TYPE_NAMES}
TYPE_VALUES["timestamp"] = CelType("google.protobuf.Timestamp")
TYPE_VALUES["duration"] = CelType("google.protobuf.Duration")


class Overload(NamedTuple):
    """One overload of an operator or function: its static types and its run-time implementation."""

    params: tuple[Any, ...]
    result: Any
    impl: Callable[..., Any] | None  # None: a dedicated operator (pure_values), or no run-time overload
    member: bool  # callable as receiver.name(...)
    plain: bool  # callable as name(...)


SIGNATURES: dict[str, list[Overload]] = {}


def _declare(name: str, style: str, params: tuple[Any, ...], result: Any, impl: Any = None) -> None:
    SIGNATURES.setdefault(name, []).append(Overload(params, result, impl, "m" in style, "g" in style))


def _int64(value: int) -> IntType:
    value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integer overflow")
    return IntType(value)


def _uint64(value: int) -> UintType:
    value = int(value)
    if not 0 <= value <= UINT64_MAX:
        raise ValueError("unsigned integer overflow")
    return UintType(value)


def _divide(a: int, b: int) -> int:
    if b == 0:
        raise ValueError("divide by zero")
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _modulo(a: int, b: int) -> int:
    if b == 0:
        raise ValueError("modulus by zero")
    if a == INT64_MIN and b == -1:  # cel-cpp reports this as an overflow
        raise ValueError("integer overflow")
    return -(abs(a) % abs(b)) if a < 0 else abs(a) % abs(b)


def _fdivide(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _time(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def run(a: Any, b: Any) -> Any:
        try:
            value = fn(to_plain(a), to_plain(b))
        except OverflowError:
            raise ValueError("timestamp overflow") from None
        if isinstance(value, datetime):
            return TimestampType(value)
        return DurationType(strings.check_duration(value))

    return run


def _to_int(value: float) -> int:
    if not -(2.0**63) <= value < 2.0**63:  # also false for NaN
        raise ValueError("double out of int64 range")
    return int(value)


def _to_uint(value: float) -> UintType:
    if not 0 <= value < 2.0**64:
        raise ValueError("double out of uint64 range")
    return UintType(int(value))


def _from_seconds(seconds: int) -> datetime:
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError("timestamp overflow") from None


def _duration_part(micros_per_unit: int, modulo: int = 0) -> Callable[[Any], int]:
    def part(value: Any) -> int:
        micros = to_plain(value) // timedelta(microseconds=1)
        units = abs(micros) // micros_per_unit
        return int((-1 if micros < 0 else 1) * (units % modulo if modulo else units))

    return part


def _declare_all() -> None:
    for op, fn in (("_+_", operator.add), ("_-_", operator.sub), ("_*_", operator.mul), ("_/_", _divide)):
        _declare(op, "g", ("int", "int"), "int", lambda a, b, fn=fn: _int64(fn(int(a), int(b))))
        _declare(op, "g", ("uint", "uint"), "uint", lambda a, b, fn=fn: _uint64(fn(int(a), int(b))))
    for op, fn in (("_+_", operator.add), ("_-_", operator.sub), ("_*_", operator.mul), ("_/_", _fdivide)):
        _declare(op, "g", ("double", "double"), "double", lambda a, b, fn=fn: DoubleType(fn(float(a), float(b))))
    _declare("_%_", "g", ("int", "int"), "int", lambda a, b: IntType(_modulo(int(a), int(b))))
    _declare("_%_", "g", ("uint", "uint"), "uint", lambda a, b: UintType(_modulo(int(a), int(b))))
    for kind in ("string", "bytes", _LIST):
        _declare("_+_", "g", (kind, kind), kind, operator.add)
    _declare("_+_", "g", ("timestamp", "duration"), "timestamp", _time(operator.add))
    _declare("_+_", "g", ("duration", "timestamp"), "timestamp", _time(operator.add))
    _declare("_+_", "g", ("duration", "duration"), "duration", _time(operator.add))
    _declare("_-_", "g", ("timestamp", "timestamp"), "duration", _time(operator.sub))
    _declare("_-_", "g", ("timestamp", "duration"), "timestamp", _time(operator.sub))
    _declare("_-_", "g", ("duration", "duration"), "duration", _time(operator.sub))
    _declare("-_", "g", ("int",), "int", lambda a: _int64(-int(a)))
    _declare("-_", "g", ("double",), "double", lambda a: DoubleType(-float(a)))
    _declare("!_", "g", ("bool",), "bool", operator.not_)
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
    _declare("dyn", "g", ("A",), DYN)
    # cel-cpp declares these two but has no run-time overload: they type-check, then fail.
    _declare("int", "g", ("duration",), "int")
    _declare("duration", "g", ("int",), "duration")
    _declare("type", "g", ("A",), ("type", "A"), lambda v: TYPE_VALUES[kind_of(v)])
    for sized in ("string", "bytes", _LIST, _MAP):
        _declare("size", "gm", (sized,), "int", len)
    for name, test in (("contains", operator.contains), ("startsWith", str.startswith), ("endsWith", str.endswith)):
        _declare(name, "m", ("string", "string"), "bool", test)
    _declare("matches", "gm", ("string", "string"), "bool", lambda s, p: matches(s, str(p)))
    _declare_conversions()
    _declare_gateway_functions()


def _declare_conversions() -> None:
    conversions: dict[str, dict[str, Callable[[Any], Any]]] = {
        "int": {"int": int, "uint": _int64, "double": _to_int, "string": strings.parse_int,
                "timestamp": strings.timestamp_seconds},
        "uint": {"int": _uint64, "uint": UintType, "double": _to_uint,
                 "string": lambda s: UintType(strings.parse_int(s, 0, UINT64_MAX))},
        "double": {"int": float, "uint": float, "double": float, "string": strings.parse_double},
        "string": {"int": str, "uint": str, "double": strings.format_double, "string": str,
                   "bytes": bytes.decode, "bool": lambda b: "true" if b else "false",
                   "timestamp": strings.format_timestamp, "duration": strings.format_duration},
        "bool": {"bool": bool, "string": strings.parse_bool},
        "bytes": {"bytes": bytes, "string": lambda s: s.encode()},
        "timestamp": {"string": strings.parse_timestamp, "timestamp": _same, "int": _from_seconds},
        "duration": {"string": strings.parse_duration, "duration": _same},
    }
    for target, sources in conversions.items():  # each conversion receives a plain Python value
        for source, convert in sources.items():
            _declare(target, "g", (source,), target, lambda v, c=convert, t=target: _cast(t, c(to_plain(v))))
    for name in ("getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
                 "getHours", "getMinutes", "getSeconds", "getMilliseconds"):
        _declare(name, "m", ("timestamp",), "int", lambda t, n=name: getattr(t, n)())
        _declare(name, "m", ("timestamp", "string"), "int", lambda t, z, n=name: getattr(t, n)(z))
    for name, part in (("getHours", _duration_part(3_600_000_000)), ("getMinutes", _duration_part(60_000_000)),
                       ("getSeconds", _duration_part(1_000_000)), ("getMilliseconds", _duration_part(1000, 1000))):
        _declare(name, "m", ("duration",), "int", part)


def _declare_gateway_functions() -> None:
    kinds = {"string": "string", "bool": "bool", "map": ("map", "string", DYN)}
    for name, (impl, params, result) in FUNCTIONS.items():
        plain_impl = lambda *a, f=impl: f(*map(str, a))  # noqa: E731
        _declare(name, "g", tuple(kinds[p] for p in params), kinds[result], plain_impl)
    for name, overloads in strings.STRING_EXTENSION.items():
        for params, result, impl in overloads:
            _declare(name, "m", params, result, lambda *a, f=impl: f(*map(to_plain, a)))


def _same(value: Any) -> Any:
    return value


def _cast(target: str, value: Any) -> Any:
    # uint results must stay uint; everything else converts by its Python type
    return UintType(value) if target == "uint" else value


def _accepts(param: Any, kind: str) -> bool:
    if isinstance(param, tuple):
        return bool(param[0] == kind)
    return param == kind or param in TYPE_VARIABLES or param == DYN


def _dispatcher(name: str, overloads: list[Overload]) -> Callable[..., Result]:
    def call(*args: Any) -> Any:
        error = first_error(*args)
        if error is not None:
            return error
        kinds = [kind_of(arg) for arg in args]
        for overload in overloads:
            if len(overload.params) == len(kinds) and all(map(_accepts, overload.params, kinds)):
                try:
                    return to_cel(cast(Callable[..., Any], overload.impl)(*args))
                except Exception as exc:  # a failing function is an evaluation error, never a crash
                    return CELEvalError(str(exc) or type(exc).__name__)
        return no_overload(name, *args)

    return call


def runtime_functions() -> dict[str, Callable[..., Result]]:
    """Every run-time overload as a celpy function, plus the operators with their own dispatch."""
    functions = {
        name: _dispatcher(name, [o for o in overloads if o.impl is not None])
        for name, overloads in SIGNATURES.items()
        if any(o.impl is not None for o in overloads)
    }
    functions.update(operator_functions())
    return functions


_declare_all()
