"""The cel-python engine's run-time overloads: an implementation for each one it can run.

The static table is the front end's (``signatures.SIGNATURES``); this module gives the overloads of
that table their implementations, keyed by name and parameter types, with cel-cpp's semantics:
arithmetic needs both operands of one type, ints overflow, conversions and the strings extension
fail as evaluation errors. ``runtime_functions()`` dispatches them for celpy.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

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
from gateway.policy.cel.signatures import DURATION_PARTS, DYN, GATEWAY_KINDS, SIGNATURES, TIME_PARTS, TYPE_NAMES
from gateway.policy.cel.strings import INT64_MAX, INT64_MIN, UINT64_MAX
from gateway.policy.cel.types import TYPE_VARIABLES

__all__ = ["TYPE_VALUES", "runtime_functions"]

_LIST, _MAP = ("list", "A"), ("map", "A", "B")
# The value of type(x) or of the identifier ``int``, by kind.
TYPE_VALUES = {kind: CelType(kind) for kind in TYPE_NAMES}
TYPE_VALUES["timestamp"] = CelType("google.protobuf.Timestamp")
TYPE_VALUES["duration"] = CelType("google.protobuf.Duration")

# name -> [(parameter types, implementation)], in the order dispatch tries them
_IMPLEMENTATIONS: dict[str, list[tuple[tuple[Any, ...], Callable[..., Any]]]] = {}


def _declare(name: str, params: tuple[Any, ...], impl: Callable[..., Any]) -> None:
    if not any(o.params == params for o in SIGNATURES.get(name, ())):
        raise AssertionError(f"{name}{params} is not in the signature table")  # a typo here would go unseen
    _IMPLEMENTATIONS.setdefault(name, []).append((params, impl))


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


def _implement_operators() -> None:
    for op, fn in (("_+_", operator.add), ("_-_", operator.sub), ("_*_", operator.mul), ("_/_", _divide)):
        _declare(op, ("int", "int"), lambda a, b, fn=fn: _int64(fn(int(a), int(b))))
        _declare(op, ("uint", "uint"), lambda a, b, fn=fn: _uint64(fn(int(a), int(b))))
    for op, fn in (("_+_", operator.add), ("_-_", operator.sub), ("_*_", operator.mul), ("_/_", _fdivide)):
        _declare(op, ("double", "double"), lambda a, b, fn=fn: DoubleType(fn(float(a), float(b))))
    _declare("_%_", ("int", "int"), lambda a, b: IntType(_modulo(int(a), int(b))))
    _declare("_%_", ("uint", "uint"), lambda a, b: UintType(_modulo(int(a), int(b))))
    for kind in ("string", "bytes", _LIST):
        _declare("_+_", (kind, kind), operator.add)
    _declare("_+_", ("timestamp", "duration"), _time(operator.add))
    _declare("_+_", ("duration", "timestamp"), _time(operator.add))
    _declare("_+_", ("duration", "duration"), _time(operator.add))
    _declare("_-_", ("timestamp", "timestamp"), _time(operator.sub))
    _declare("_-_", ("timestamp", "duration"), _time(operator.sub))
    _declare("_-_", ("duration", "duration"), _time(operator.sub))
    _declare("-_", ("int",), lambda a: _int64(-int(a)))
    _declare("-_", ("double",), lambda a: DoubleType(-float(a)))
    _declare("!_", ("bool",), operator.not_)
    # comparisons, equality, in, indexing, ?: and the logical operators: dedicated dispatch (pure_values)


def _implement_functions() -> None:
    _declare("type", ("A",), lambda v: TYPE_VALUES[kind_of(v)])
    for sized in ("string", "bytes", _LIST, _MAP):
        _declare("size", (sized,), len)
    for name, test in (("contains", operator.contains), ("startsWith", str.startswith), ("endsWith", str.endswith)):
        _declare(name, ("string", "string"), test)
    _declare("matches", ("string", "string"), lambda s, p: matches(s, str(p)))
    _implement_conversions()
    for name in TIME_PARTS:
        _declare(name, ("timestamp",), lambda t, n=name: getattr(t, n)())
        _declare(name, ("timestamp", "string"), lambda t, z, n=name: getattr(t, n)(z))
    parts = {"getHours": _duration_part(3_600_000_000), "getMinutes": _duration_part(60_000_000),
             "getSeconds": _duration_part(1_000_000), "getMilliseconds": _duration_part(1000, 1000)}
    for name in DURATION_PARTS:
        _declare(name, ("duration",), parts[name])
    for name, (impl, params, _) in FUNCTIONS.items():
        plain_impl = lambda *a, f=impl: f(*map(str, a))  # noqa: E731
        _declare(name, tuple(GATEWAY_KINDS[p] for p in params), plain_impl)
    for name, overloads in strings.STRING_EXTENSION.items():
        for params, _, impl in overloads:
            _declare(name, params, lambda *a, f=impl: f(*map(to_plain, a)))


def _implement_conversions() -> None:
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
            _declare(target, (source,), lambda v, c=convert, t=target: _cast(t, c(to_plain(v))))


def _same(value: Any) -> Any:
    return value


def _cast(target: str, value: Any) -> Any:
    # uint results must stay uint; everything else converts by its Python type
    return UintType(value) if target == "uint" else value


def _accepts(param: Any, kind: str) -> bool:
    if isinstance(param, tuple):
        return bool(param[0] == kind)
    return param == kind or param in TYPE_VARIABLES or param == DYN


def _dispatcher(name: str, overloads: list[tuple[tuple[Any, ...], Callable[..., Any]]]) -> Callable[..., Result]:
    def call(*args: Any) -> Any:
        error = first_error(*args)
        if error is not None:
            return error
        kinds = [kind_of(arg) for arg in args]
        for params, impl in overloads:
            if len(params) == len(kinds) and all(map(_accepts, params, kinds)):
                try:
                    return to_cel(impl(*args))
                except Exception as exc:  # a failing function is an evaluation error, never a crash
                    return CELEvalError(str(exc) or type(exc).__name__)
        return no_overload(name, *args)

    return call


def runtime_functions() -> dict[str, Callable[..., Result]]:
    """Every run-time overload as a celpy function, plus the operators with their own dispatch."""
    functions = {name: _dispatcher(name, overloads) for name, overloads in _IMPLEMENTATIONS.items()}
    functions.update(operator_functions())
    return functions


_implement_operators()
_implement_functions()
