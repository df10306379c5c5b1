"""The fallback engine: CEL in pure Python on top of ``cel-python`` (``celpy``).

celpy parses with Lark and interprets the tree, but it has no type checker and its run-time
semantics drift from cel-cpp's in places that matter for policies. This engine therefore adds:

* a small static checker over the Lark tree, driven by one signature table (``_SIGNATURES``),
  that reports undeclared names and functions, operator and function overload mismatches of
  statically known types, and the expression's result type, with positions that match the
  C++ engine (the operator, the ``(`` of a call, the ``.`` of a selection);
* operators and functions registered as celpy functions that follow cel-cpp: equality across
  types is false and across numeric types compares values, ordering compares numbers across
  int/uint/double, arithmetic needs both operands of one type, ints overflow, ``&&``/``||``
  absorb errors, a missing map key is an error;
* an evaluator subclass for identifiers, operators (``&&``/``||`` short-circuit), ``has()``,
  field selection and the macros, run on a tree without single-child wrapper nodes.

Known differences from the C++ engine:

* ``strings.quote()`` and ``format()`` of the strings extension are not provided (compile error).
* Timestamps and durations hold microseconds, not nanoseconds: ``duration("1ns")`` is zero.
* Error messages are worded like cel-cpp's, not identically; error kinds and positions match.
* A function call with a leading dot (``.size(x)``) is not supported.
* Nesting is capped at ``MAX_TREE_DEPTH`` parse levels, about ten nested parentheses, calls or
  lists (cel-cpp allows 32), so that evaluation fits Python's default recursion limit.
* Iterating a map (``m.map(k, k)``, ``m.all(...)``) visits keys in insertion order; cel-cpp's order
  is unspecified and differs, so only order-independent results agree.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, cast

import celpy
import celpy.celparser
import re2  # google-re2, the engine behind CEL's matches() everywhere
from celpy.celtypes import (
    BoolType,
    BytesType,
    DoubleType,
    DurationType,
    IntType,
    ListType,
    MapType,
    StringType,
    TimestampType,
    UintType,
)
from celpy.evaluation import Activation, CELEvalError, Evaluator, Result
from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

from gateway.errors import CelCompileError, CelEvaluationError
from gateway.policy.cel import strings
from gateway.policy.cel.base import VARIABLES, ExprType
from gateway.policy.cel.functions import FUNCTIONS
from gateway.policy.cel.strings import INT64_MAX, INT64_MIN, UINT64_MAX

__all__ = ["PureEngine"]

# --- static types: a name ("int", "dyn", type variables "A"/"B") or ("list", T), ("map", K, V),
# ("type", T). The same table types calls at compile time and dispatches them at run time.

DYN, BOOL = "dyn", "bool"
_VARS = ("A", "B")
_LIST, _MAP = ("list", "A"), ("map", "A", "B")
_VARIABLE_TYPE = ("map", "string", DYN)
_TYPE_NAMES: dict[str, Any] = {
    **{n: n for n in ("int", "uint", "double", "string", "bytes", "bool", "null_type")},
    "list": ("list", DYN), "map": ("map", DYN, DYN), "type": ("type", DYN),
}
_MACROS = {"all", "exists", "exists_one", "map", "filter"}
# celpy's interpreter recurses about five Python frames per parse-tree level. 120 levels (about ten
# nested parentheses, calls or lists) stay near 600 frames, leaving room for the caller under
# Python's default recursion limit of 1000, which this engine does not raise.
MAX_TREE_DEPTH = 120


class _Overload(NamedTuple):
    params: tuple[Any, ...]
    result: Any
    impl: Callable[..., Any] | None  # None: a dedicated operator below, or no run-time overload
    member: bool  # callable as receiver.name(...)
    plain: bool  # callable as name(...)


_SIGNATURES: dict[str, list[_Overload]] = {}


def _declare(name: str, style: str, params: tuple[Any, ...], result: Any, impl: Any = None) -> None:
    _SIGNATURES.setdefault(name, []).append(_Overload(params, result, impl, "m" in style, "g" in style))


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
            value = fn(_plain(a), _plain(b))
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


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"invalid regular expression: {reason}") from None


def _duration_part(micros_per_unit: int, modulo: int = 0) -> Callable[[Any], int]:
    def part(value: Any) -> int:
        micros = _plain(value) // timedelta(microseconds=1)
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
    _declare("type", "g", ("A",), ("type", "A"), lambda v: _TYPE_VALUES[_kind(v)])
    for sized in ("string", "bytes", _LIST, _MAP):
        _declare("size", "gm", (sized,), "int", len)
    for name, test in (("contains", operator.contains), ("startsWith", str.startswith), ("endsWith", str.endswith)):
        _declare(name, "m", ("string", "string"), "bool", test)
    _declare("matches", "gm", ("string", "string"), "bool", lambda s, p: _regex(str(p)).search(s) is not None)
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
            _declare(target, "g", (source,), target, lambda v, c=convert, t=target: _cast(t, c(_plain(v))))
    for name in ("getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
                 "getHours", "getMinutes", "getSeconds", "getMilliseconds"):
        _declare(name, "m", ("timestamp",), "int", lambda t, n=name: getattr(t, n)())
        _declare(name, "m", ("timestamp", "string"), "int", lambda t, z, n=name: getattr(t, n)(z))
    for name, part in (("getHours", _duration_part(3_600_000_000)), ("getMinutes", _duration_part(60_000_000)),
                       ("getSeconds", _duration_part(1_000_000)), ("getMilliseconds", _duration_part(1000, 1000))):
        _declare(name, "m", ("duration",), "int", part)
    kinds = {"string": "string", "bool": "bool", "map": ("map", "string", DYN)}
    for name, (impl, params, result) in FUNCTIONS.items():
        plain_impl = lambda *a, f=impl: f(*map(str, a))  # noqa: E731
        _declare(name, "g", tuple(kinds[p] for p in params), kinds[result], plain_impl)
    for name, overloads in strings.STRING_EXTENSION.items():
        for params, result, impl in overloads:
            _declare(name, "m", params, result, lambda *a, f=impl: f(*map(_plain, a)))


def _same(value: Any) -> Any:
    return value


def _cast(target: str, value: Any) -> Any:
    # uint results must stay uint; everything else converts by its Python type
    return UintType(value) if target == "uint" else value


# --- run-time values ---


class _CelType:
    """A CEL type as a value, e.g. the result of type(x) or the identifier ``int``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


_KINDS: dict[type, str] = {
    type(None): "null_type", BoolType: "bool", IntType: "int", UintType: "uint", DoubleType: "double",
    StringType: "string", BytesType: "bytes", ListType: "list", MapType: "map",
    TimestampType: "timestamp", DurationType: "duration", _CelType: "type",
}
_KIND_CHECKS: tuple[tuple[type, str], ...] = (
    (BoolType, "bool"), (bool, "bool"), (UintType, "uint"), (int, "int"), (float, "double"),
    (str, "string"), (bytes, "bytes"), (list, "list"), (Mapping, "map"), (datetime, "timestamp"),
    (timedelta, "duration"),
)
_TYPE_VALUES = {kind: _CelType(kind) for kind in _TYPE_NAMES}
_TYPE_VALUES["timestamp"] = _CelType("google.protobuf.Timestamp")
_TYPE_VALUES["duration"] = _CelType("google.protobuf.Duration")
_NUMBERS = {"int", "uint", "double"}
_ORDERED = {"bool", "string", "bytes", "timestamp", "duration"}
_MISSING = object()


def _kind(value: Any) -> str:
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = next((k for t, k in _KIND_CHECKS if isinstance(value, t)), type(value).__name__)
    return kind


def _to_cel(value: Any) -> Any:
    """Plain Python (JSON) data as celpy values; celpy values pass through."""
    if type(value) in _KINDS:
        return value
    if isinstance(value, bool):
        return BoolType(value)
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return IntType(value)
        if 0 <= value <= UINT64_MAX:
            return UintType(value)
        raise ValueError(f"integer {value} is out of range")
    if isinstance(value, float):
        return DoubleType(value)
    if isinstance(value, str):
        return StringType(value)
    if isinstance(value, (bytes, bytearray)):
        return BytesType(bytes(value))
    if isinstance(value, list):
        return ListType([_to_cel(item) for item in value])
    if isinstance(value, Mapping):
        return MapType({_to_cel(key): _to_cel(item) for key, item in value.items()})
    if isinstance(value, datetime):
        return TimestampType(value if value.tzinfo else value.replace(tzinfo=UTC))
    if isinstance(value, timedelta):
        return DurationType(value)
    raise TypeError(f"unsupported value of type {type(value).__name__}")


def _plain(value: Any) -> Any:
    """A celpy value as plain Python; an error nested in a list or map is raised."""
    if isinstance(value, CELEvalError):
        raise value
    kind = _kind(value)
    if kind == "bool":
        return bool(value)
    if kind in ("int", "uint"):
        return int(value)
    if kind == "double":
        return float(value)
    if kind == "string":
        return str(value)
    if kind == "bytes":
        return bytes(value)
    if kind == "list":
        return [_plain(item) for item in value]
    if kind == "map":
        return {_plain(key): _plain(item) for key, item in value.items()}
    if kind == "timestamp":
        v = value.astimezone(UTC)
        return datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, UTC)
    if kind == "duration":
        return timedelta(days=value.days, seconds=value.seconds, microseconds=value.microseconds)
    if kind == "type":
        return value.name
    return value


def _number(value: Any) -> int | float:
    return float(value) if _kind(value) == "double" else int(value)


def _equal(a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka in _NUMBERS and kb in _NUMBERS:
        return _number(a) == _number(b)
    if ka != kb:
        return False
    if ka == "list":
        return len(a) == len(b) and all(map(_equal, a, b))
    if ka == "map":
        return len(a) == len(b) and all(
            (other := _lookup(b, key)) is not _MISSING and _equal(item, other) for key, item in a.items()
        )
    return bool(_plain(a) == _plain(b))


def _lookup(mapping: Any, key: Any) -> Any:
    if isinstance(key, str):  # the common case: JSON object keys
        try:
            return dict.get(mapping, key, _MISSING)
        except TypeError:
            pass
    return next((item for k, item in mapping.items() if _equal(k, key)), _MISSING)


def _first_error(*values: Any) -> CELEvalError | None:
    return next((v for v in values if isinstance(v, CELEvalError)), None)


def _no_overload(name: str, *args: Any) -> CELEvalError:
    return CELEvalError(f"no matching overload for {name}({', '.join(map(_kind, args))})")


def _accepts(param: Any, kind: str) -> bool:
    if isinstance(param, tuple):
        return bool(param[0] == kind)
    return param == kind or param in _VARS or param == DYN


def _dispatcher(name: str, overloads: list[_Overload]) -> Callable[..., Result]:
    def call(*args: Any) -> Any:
        error = _first_error(*args)
        if error is not None:
            return error
        kinds = [_kind(arg) for arg in args]
        for overload in overloads:
            if len(overload.params) == len(kinds) and all(map(_accepts, overload.params, kinds)):
                try:
                    return _to_cel(cast(Callable[..., Any], overload.impl)(*args))
                except Exception as exc:  # a failing function is an evaluation error, never a crash
                    return CELEvalError(str(exc) or type(exc).__name__)
        return _no_overload(name, *args)

    return call


def _relation(name: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Result]:
    def run(a: Any, b: Any) -> Result:
        ka, kb = _kind(a), _kind(b)
        if ka in _NUMBERS and kb in _NUMBERS:  # int, uint and double compare by value at run time
            return BoolType(compare(_number(a), _number(b)))
        if ka == kb and ka in _ORDERED:
            return BoolType(compare(_plain(a), _plain(b)))
        return _first_error(a, b) or _no_overload(name, a, b)

    return run


def _in(item: Any, container: Any) -> Result:
    kind = _kind(container)
    if _first_error(item, container) or kind not in ("list", "map"):
        return _first_error(item, container) or _no_overload("@in", item, container)
    if kind == "list":
        return BoolType(any(_equal(item, element) for element in container))
    return BoolType(_lookup(container, item) is not _MISSING)


def _index(container: Any, key: Any) -> Result:
    kind, key_kind = _kind(container), _kind(key)
    if _first_error(container, key):
        return _first_error(container, key)
    if kind == "map":
        item = _lookup(container, key)
        shown = f'"{key}"' if key_kind == "string" else str(_plain(key))
        return CELEvalError(f"no such key: {shown}") if item is _MISSING else item
    if kind == "list" and key_kind in _NUMBERS and float(key).is_integer():
        if 0 <= int(key) < len(container):
            return container[int(key)]  # type: ignore[no-any-return]
        return CELEvalError(f"index {int(key)} out of range for a list of size {len(container)}")
    return _no_overload("_[_]", container, key)


def _runtime_functions() -> dict[str, Callable[..., Result]]:
    functions = {
        name: _dispatcher(name, [o for o in overloads if o.impl is not None])
        for name, overloads in _SIGNATURES.items()
        if any(o.impl is not None for o in overloads)
    }
    functions.update({
        "_==_": lambda a, b: _first_error(a, b) or BoolType(_equal(a, b)),
        "_!=_": lambda a, b: _first_error(a, b) or BoolType(not _equal(a, b)),
        "_<_": _relation("_<_", operator.lt), "_<=_": _relation("_<=_", operator.le),
        "_>_": _relation("_>_", operator.gt), "_>=_": _relation("_>=_", operator.ge),
        "_in_": _in, "_[_]": _index,
    })
    return functions


_declare_all()


# --- compile time: parse, then type the tree ---

_PASS_THROUGH = {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
                 "unary", "member", "primary", "paren_expr"}
_OPERATORS = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
    "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in", "addition_add": "_+_",
    "addition_sub": "_-_", "multiplication_mul": "_*_", "multiplication_div": "_/_",
    "multiplication_mod": "_%_", "unary_not": "!_", "unary_neg": "-_",
    "conditionalor": "_||_", "conditionaland": "_&&_",
}
_RUNTIME_NAMES = {**_OPERATORS, "relation_in": "_in_"}
# Single-child wrappers the evaluator can skip; celpy inspects ``primary`` and its child, so they stay.
_COLLAPSIBLE = _PASS_THROUGH - {"primary", "paren_expr"}
_SKIP = re.compile(r"(?:\s+|//[^\n]*)*")
_FLOAT = re.compile(r"-?(?:\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?)")
_ESCAPE = re.compile(r"\\(?:[abfnrtv\"'\\]|[0-3][0-7]{2}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


@functools.cache
def _parser() -> Lark:
    # celpy's own parser turns true/false into tokens without positions; this one keeps them,
    # so every node has a position for error messages. Same grammar and options, same trees.
    def keep_position(token: Token) -> Token:
        if token.value in ("true", "false"):
            return Token.new_borrow_pos("BOOL_LIT", token.value, token)
        return token

    grammar = Path(celpy.celparser.__file__).with_name("cel.lark").read_text()
    return Lark(grammar, parser="lalr", start="expr", g_regex_flags=re.M, propagate_positions=True,
                maybe_placeholders=False, priority="invert", lexer_callbacks={"IDENT": keep_position})


def _line_column(source: str, pos: int) -> tuple[int, int]:
    return source.count("\n", 0, pos) + 1, pos - source.rfind("\n", 0, pos)


def _parse(source: str) -> Tree[Any]:
    def error(pos: int, what: str) -> CelCompileError:
        return CelCompileError(f"Syntax error: {what}", *_line_column(source, pos))

    try:
        return _parser().parse(source)
    except UnexpectedToken as exc:
        if exc.token.type == "$END":
            raise error(len(source), "unexpected end of expression") from None
        raise error(exc.token.start_pos or 0, f"unexpected {exc.token.value!r}") from None
    except UnexpectedCharacters as exc:
        pos = exc.pos_in_stream or 0
        raise error(pos, f"unexpected character {source[pos:pos + 1]!r}") from None
    except UnexpectedEOF:
        raise error(len(source), "unexpected end of expression") from None
    except LarkError as exc:
        raise CelCompileError(f"Syntax error: {exc}") from None


def _unwrap(tree: Tree[Any]) -> Tree[Any]:
    while tree.data in _PASS_THROUGH and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        tree = tree.children[0]
    return tree


def _dotted(tree: Tree[Any]) -> str | None:
    """``a.b.c`` when the tree is a chain of plain field selections on an identifier."""
    node = _unwrap(tree)
    if node.data == "ident":
        return str(node.children[0])
    if node.data == "member_dot":
        base = _dotted(node.children[0])
        return None if base is None else f"{base}.{node.children[1]}"
    return None


def _fmt(t: Any) -> str:
    return f"{t[0]}({', '.join(map(_fmt, t[1:]))})" if isinstance(t, tuple) else str(t)


def _compatible(a: Any, b: Any) -> bool:
    if a == b or DYN in (a, b):
        return True
    return (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] and len(a) == len(b)
            and all(map(_compatible, a[1:], b[1:])))


def _unify(param: Any, arg: Any, bound: dict[str, Any]) -> bool:
    if param in _VARS:
        if param not in bound:
            bound[param] = arg
        elif not _compatible(bound[param], arg):
            return False
        elif bound[param] != arg:
            bound[param] = DYN
        return True
    if DYN in (param, arg):
        return True
    if isinstance(param, tuple):
        return (isinstance(arg, tuple) and param[0] == arg[0] and len(param) == len(arg)
                and all(_unify(p, a, bound) for p, a in zip(param[1:], arg[1:], strict=True)))
    return bool(param == arg)


def _substitute(t: Any, bound: dict[str, Any]) -> Any:
    if isinstance(t, tuple):
        return tuple(_substitute(part, bound) for part in t)
    return bound.get(t, DYN) if t in _VARS else t


def _join(types: list[Any]) -> Any:
    return types[0] if types and all(t == types[0] for t in types) else DYN


class _Checker:
    """Types a parse tree; raises ``CelCompileError`` at the first problem, in source order."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, message: str, pos: int | None, kind: str = "cel-compile") -> CelCompileError:
        return CelCompileError(message, *_line_column(self.source, pos or 0), kind=kind)

    def after(self, end: int | Tree[Any] | None) -> int:
        """Position of the first token after ``end`` (an offset or a subtree)."""
        offset = end if isinstance(end, int) else getattr(getattr(end, "meta", None), "end_pos", 0)
        match = _SKIP.match(self.source, offset)
        return match.end() if match else offset

    def type_of(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        kids = tree.children
        if tree.data in _PASS_THROUGH and len(kids) == 1:
            return self.type_of(kids[0], scope)
        if tree.data == "expr":  # cond ? a : b
            types = [self.type_of(kid, scope) for kid in kids]
            return self.call("_?_:_", types, self.after(kids[0]))
        if tree.data in ("conditionalor", "conditionaland"):
            left, right, name = kids[0], kids[1], _OPERATORS[tree.data]
        elif tree.data in ("relation", "addition", "multiplication"):
            left, right, name = kids[0].children[0], kids[1], _OPERATORS[kids[0].data]
        elif tree.data == "unary":
            operand = self.type_of(kids[1], scope)
            return self.call(_OPERATORS[kids[0].data], [operand], getattr(kids[0].meta, "start_pos", 0))
        else:
            return getattr(self, tree.data)(tree, scope)
        return self.call(name, [self.type_of(left, scope), self.type_of(right, scope)], self.after(left))

    def call(self, name: str, types: list[Any], pos: int, member: bool = False) -> Any:
        overloads = [o for o in _SIGNATURES.get(name, ())
                     if (o.member if member else o.plain) and len(o.params) == len(types)]
        if not overloads:
            raise self.error(f"undeclared reference to '{name}'", pos, "cel-undeclared")
        results = []
        for overload in overloads:
            bound: dict[str, Any] = {}
            if all(_unify(p, t, bound) for p, t in zip(overload.params, types, strict=True)):
                results.append(_substitute(overload.result, bound))
        if not results:
            shown = ", ".join(map(_fmt, types))
            raise self.error(f"found no matching overload for '{name}' applied to '({shown})'", pos)
        return _join(results)

    def declared(self, name: str, scope: dict[str, Any]) -> Any:
        if name in scope:
            return scope[name]
        if name in VARIABLES:
            return _VARIABLE_TYPE
        return ("type", _TYPE_NAMES[name]) if name in _TYPE_NAMES else None

    def ident(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        token = cast(Token, tree.children[0])
        found = self.declared(str(token), scope)
        if found is None:
            raise self.error(f"undeclared reference to '{token}'", token.start_pos, "cel-undeclared")
        return found

    def dot_ident(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        return self.ident(tree, {})

    def dot_ident_arg(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        raise self.error("a function call with a leading '.' is not supported", tree.meta.start_pos)

    def member_object(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        name = _dotted(tree.children[0]) or "message"
        raise self.error(f"undeclared reference to '{name}'", tree.meta.start_pos, "cel-undeclared")

    def literal(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        token = cast(Token, tree.children[0])
        text, kind, pos = str(token), token.type, token.start_pos or 0
        if kind in ("INT_LIT", "UINT_LIT"):
            digits = text.rstrip("uU").lower()
            value = int(digits.replace("0x", ""), 16 if "0x" in digits else 10)
            if not (INT64_MIN <= value <= INT64_MAX if kind == "INT_LIT" else value <= UINT64_MAX):
                raise self.error(f"invalid {'int' if kind == 'INT_LIT' else 'uint'} literal", pos)
            return "int" if kind == "INT_LIT" else "uint"
        if kind == "FLOAT_LIT":
            if not _FLOAT.fullmatch(text):
                raise self.error("Syntax error: invalid number", pos + text.find(".") + 1)
            return "double"
        if kind in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            body = text.lstrip("bB")
            if body[:1] not in ("r", "R") and "\\" in _ESCAPE.sub("", body):
                raise self.error("Syntax error: invalid escape sequence", pos)
            return "bytes" if kind == "BYTES_LIT" else "string"
        return {"BOOL_LIT": "bool", "NULL_LIT": "null_type"}[kind]

    def list_lit(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        items = tree.children[0].children if tree.children else []
        return ("list", _join([self.type_of(item, scope) for item in items]))

    def map_lit(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        entries = [self.type_of(e, scope) for e in (tree.children[0].children if tree.children else [])]
        return ("map", _join(entries[0::2]), _join(entries[1::2]))

    def member_dot(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        operand, field = cast(tuple[Tree[Any], Token], tree.children)
        dot = self.source.rindex(".", 0, field.start_pos)
        dotted = _dotted(tree)
        if dotted is not None and self.declared(dotted.split(".")[0], scope) is None:
            raise self.error(f"undeclared reference to '{dotted}'", dot, "cel-undeclared")
        target = self.type_of(operand, scope)
        if isinstance(target, tuple) and target[0] == "map":
            return target[2]
        if target == DYN:
            return DYN
        raise self.error(f"expression of type '{_fmt(target)}' cannot be the operand of a select operation", dot)

    def member_index(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        container, key = tree.children
        types = [self.type_of(container, scope), self.type_of(key, scope)]
        return self.call("_[_]", types, self.after(container))

    def ident_arg(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        name, args = cast(Token, tree.children[0]), (tree.children[1].children if len(tree.children) == 2 else [])
        if name == "has" and len(args) == 1:
            selection = _unwrap(args[0])
            if selection.data != "member_dot":
                raise self.error("has() argument must be a field selection", args[0].meta.start_pos)
            self.member_dot(selection, scope)
            return BOOL
        return self.call(str(name), [self.type_of(arg, scope) for arg in args], self.after(name.end_pos))

    def member_dot_arg(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        receiver, name = cast(tuple[Tree[Any], Token], tree.children[:2])
        args = tree.children[2].children if len(tree.children) == 3 else []
        paren = self.after(name.end_pos)
        if name in _MACROS and (len(args) == 2 or (name == "map" and len(args) == 3)):
            return self.macro(str(name), receiver, args, scope, paren)
        types = [self.type_of(receiver, scope), *(self.type_of(arg, scope) for arg in args)]
        return self.call(str(name), types, paren, member=True)

    def macro(self, name: str, receiver: Tree[Any], args: list[Any], scope: dict[str, Any], pos: int) -> Any:
        variable = _unwrap(args[0])
        if variable.data != "ident":
            raise self.error(f"{name}() variable name must be a simple identifier", args[0].meta.start_pos)
        target = self.type_of(receiver, scope)
        if target != DYN and not (isinstance(target, tuple) and target[0] in ("list", "map")):
            raise self.error(f"expression of type '{_fmt(target)}' cannot be the range of a comprehension "
                             "(must be list, map, or dynamic)", receiver.meta.start_pos)
        element = target[1] if isinstance(target, tuple) else DYN
        inner = {**scope, str(variable.children[0]): element}
        bodies = [self.type_of(arg, inner) for arg in args[1:]]
        if (name != "map" or len(bodies) == 2) and not _compatible(bodies[0], BOOL):
            step = {"all": ("_&&_", [BOOL, bodies[0]]), "exists": ("_||_", [BOOL, bodies[0]]),
                    "exists_one": ("_?_:_", [bodies[0], "int", "int"])}
            op, shown = step.get(name, ("_?_:_", [bodies[0], ("list", element), ("list", element)]))
            raise self.error(f"found no matching overload for '{op}' applied to "
                             f"'({', '.join(map(_fmt, shown))})'", pos)
        if name in ("map", "filter"):
            return ("list", bodies[-1] if name == "map" else element)
        return BOOL


# --- run time: celpy's interpreter with our identifiers, has(), selection and macros ---


def _collapse(tree: Tree[Any]) -> Tree[Any]:
    """The tree without single-child wrappers: a literal is two levels deep instead of ten."""
    kids = [_collapse(kid) if isinstance(kid, Tree) else kid for kid in tree.children]
    if tree.data in _COLLAPSIBLE and len(kids) == 1 and isinstance(kids[0], Tree):
        return kids[0]
    return Tree(tree.data, kids, tree.meta)


class _Evaluator(Evaluator):
    """celpy's interpreter on a collapsed tree, with operators dispatched directly."""

    def __init__(self, ast: Tree[Any], activation: Activation, scope: Mapping[str, Any]) -> None:
        super().__init__(ast=ast, activation=activation)
        self.scope = scope

    def expr(self, tree: Tree[Any]) -> Any:  # after collapsing, only ``c ? a : b`` is left
        cond = self.visit(tree.children[0])
        if isinstance(cond, BoolType):
            return self.visit(tree.children[1] if cond else tree.children[2])
        return _first_error(cond) or _no_overload("_?_:_", cond)

    def conditionalor(self, tree: Tree[Any]) -> Any:
        return self.logic(tree, absorbing=True)

    def conditionaland(self, tree: Tree[Any]) -> Any:
        return self.logic(tree, absorbing=False)

    def logic(self, tree: Tree[Any], absorbing: bool) -> Any:
        # false && x is false and true || x is true even when x is an error or not a bool.
        left = self.visit(tree.children[0])
        if isinstance(left, BoolType) and bool(left) is absorbing:
            return left
        right = self.visit(tree.children[1])
        values = [v for v in (left, right) if isinstance(v, BoolType)]
        if any(bool(v) is absorbing for v in values):
            return BoolType(absorbing)
        if len(values) == 2:
            return BoolType(not absorbing)
        return _first_error(left, right) or _no_overload(_OPERATORS[tree.data], left, right)

    def relation(self, tree: Tree[Any]) -> Any:
        operator_tree, right = tree.children
        function = self.activation.functions[_RUNTIME_NAMES[operator_tree.data]]
        return function(self.visit(operator_tree.children[0]), self.visit(right))

    addition = multiplication = relation

    def unary(self, tree: Tree[Any]) -> Any:
        operator_tree, operand = tree.children
        return self.activation.functions[_OPERATORS[operator_tree.data]](self.visit(operand))

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        value = self.scope.get(name, _MISSING)
        if value is not _MISSING:
            return value
        if name in _TYPE_VALUES:
            return _TYPE_VALUES[name]
        return CELEvalError(f'no value given for variable "{name}"')

    def sub_evaluator(self, ast: Tree[Any]) -> Evaluator:
        return _Evaluator(ast, self.activation, self.scope)

    def macro_has_eval(self, exprlist: Tree[Any]) -> Any:
        operand, field = _unwrap(exprlist.children[0]).children
        target = self.visit(operand)
        if _kind(target) == "map":
            return BoolType(_lookup(target, str(field)) is not _MISSING)
        return _first_error(target) or CELEvalError(f"has() cannot select a field of {_kind(target)}")

    def member_dot(self, tree: Tree[Any]) -> Any:
        operand, field = tree.children
        target = self.visit(operand)
        if _kind(target) != "map":
            return _first_error(target) or CELEvalError(f"{_kind(target)} has no field '{field}'")
        return _index(target, StringType(str(field)))

    def mapinits(self, tree: Tree[Any]) -> Any:
        values: list[Any] = self.visit_children(tree)
        result = MapType()
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if _first_error(key, value):
                return _first_error(key, value)
            if _kind(key) not in ("int", "uint", "bool", "string"):
                return CELEvalError(f"unsupported map key type: {_kind(key)}")
            if _lookup(result, key) is not _MISSING:
                return CELEvalError(f"duplicate map key {_plain(key)!r}")
            result[key] = value
        return result

    def member_dot_arg(self, tree: Tree[Any]) -> Any:
        name = str(tree.children[1])
        args = tree.children[2].children if len(tree.children) == 3 else []
        if name not in _MACROS or not (len(args) == 2 or (name == "map" and len(args) == 3)):
            return super().member_dot_arg(tree)
        target = self.visit(tree.children[0])
        if _kind(target) not in ("list", "map"):
            return _first_error(target) or CELEvalError(f"{name}() cannot range over {_kind(target)}")
        variable = str(_unwrap(args[0]).children[0])
        return self.comprehension(name, list(target), variable, args[1:])

    def comprehension(self, name: str, items: list[Any], variable: str, bodies: list[Any]) -> Any:
        results, error, count = [], None, 0
        for item in items:
            scope = {**self.scope, variable: item}
            value = _Evaluator(bodies[0], self.activation, scope).visit(bodies[0])
            if name == "map" and len(bodies) == 1:
                if isinstance(value, CELEvalError):
                    return value
                results.append(value)
            elif not isinstance(value, BoolType):  # an error or a non-bool predicate
                step = {"all": "_&&_", "exists": "_||_"}.get(name)
                value = _first_error(value) or _no_overload(step or "_?_:_", value)
                if step is None:
                    return value
                error = error or value  # all() and exists() absorb errors, like && and ||
            elif name in ("all", "exists"):
                if bool(value) is (name == "exists"):
                    return value
            elif name == "exists_one":
                count += bool(value)
            elif value and name == "filter":
                results.append(item)
            elif value:  # map(x, predicate, transform)
                mapped = _Evaluator(bodies[1], self.activation, scope).visit(bodies[1])
                if isinstance(mapped, CELEvalError):
                    return mapped
                results.append(mapped)
        if name in ("all", "exists"):
            return error or BoolType(name == "all")
        return BoolType(count == 1) if name == "exists_one" else ListType(results)


class _Runner(celpy.InterpretedRunner):
    """celpy's interpreted runner, with our evaluator and the functions bound once."""

    def __init__(self, environment: celpy.Environment, ast: Tree[Any], functions: Any = None) -> None:
        super().__init__(environment, ast, functions)
        self.base = self.new_activation()

    def evaluate(self, context: Any) -> Any:
        return _Evaluator(self.ast, self.base, context).evaluate()


class _Program:
    __slots__ = ("_runner",)

    def __init__(self, runner: _Runner) -> None:
        self._runner = runner

    def evaluate(self, activation: Any) -> Any:
        """The plain Python result, or ``CelEvaluationError`` with a short message."""
        try:
            return _plain(self._runner.evaluate(activation))
        except CELEvalError as exc:
            text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "evaluation failed"
            # celpy appends its whole activation to some messages; keep only the first clause.
            raise CelEvaluationError(re.sub(r" \(in (activation|container) .*", "", text, flags=re.S)[:300]) from exc
        except RecursionError:
            raise CelEvaluationError("evaluation is nested too deeply") from None
        except Exception as exc:  # a celpy internal failure is still only this expression's failure
            raise CelEvaluationError(f"evaluation failed ({type(exc).__name__})") from exc


def _check_depth(tree: Tree[Any], source: str) -> None:
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise CelCompileError(
                "expression is nested too deeply for the cel-python engine "
                "(about ten levels of parentheses, calls or lists at most)",
                *_line_column(source, getattr(node.meta, "start_pos", 0)),
            )
        stack.extend((kid, depth + 1) for kid in node.children if isinstance(kid, Tree))


class PureEngine:
    """CEL via cel-python, checked and aligned with the C++ engine."""

    name = "cel-python"

    def __init__(self) -> None:
        limit = sys.getrecursionlimit()
        self._env = celpy.Environment(runner_class=_Runner)
        sys.setrecursionlimit(limit)  # celpy sets a process-wide 2500; MAX_TREE_DEPTH is our bound
        _parser()  # built once, here, rather than on the first compile
        self._functions = _runtime_functions()

    def compile(self, source: str, expected: ExprType) -> _Program:
        """Parse, bound, type-check and build ``source`` once; ``CelCompileError`` with a position."""
        tree = _parse(source)
        _check_depth(tree, source)
        result = _Checker(source).type_of(tree, {})
        want = {ExprType.BOOL: BOOL, ExprType.STRING: "string"}.get(expected)
        if want is not None and result not in (want, DYN):
            shown = _fmt(result).replace("(", "<").replace(")", ">").replace("null_type", "null")
            raise CelCompileError(f"expression must evaluate to {expected}, but it is {shown}", kind="cel-type")
        return _Program(self._env.program(_collapse(tree), functions=self._functions))  # type: ignore[arg-type]

    def activation(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The declared variables present in ``data``, converted to celpy values once per round."""
        bound = {}
        for name in VARIABLES:
            if name not in data:
                continue
            if not isinstance(data[name], Mapping):
                raise CelEvaluationError(f"input cannot be given to CEL: '{name}' must be a map")
            try:
                bound[name] = _to_cel(data[name])
            except (TypeError, ValueError, RecursionError) as exc:
                raise CelEvaluationError(f"input cannot be given to CEL: {name}: {exc}") from exc
        return bound
