"""celpy values for the cel-python engine: kinds, conversion to and from plain Python, and the
operators whose run-time semantics follow cel-cpp (equality, ordering, ``in``, indexing).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

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
from celpy.evaluation import CELEvalError, Result

from gateway.policy.cel.strings import INT64_MAX, INT64_MIN, UINT64_MAX

__all__ = [
    "MISSING",
    "CelType",
    "first_error",
    "index",
    "kind_of",
    "lookup",
    "no_overload",
    "operator_functions",
    "to_cel",
    "to_plain",
]

class CelType:
    """A CEL type as a value, e.g. the result of type(x) or the identifier ``int``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


_KINDS: dict[type, str] = {
    type(None): "null_type", BoolType: "bool", IntType: "int", UintType: "uint", DoubleType: "double",
    StringType: "string", BytesType: "bytes", ListType: "list", MapType: "map",
    TimestampType: "timestamp", DurationType: "duration", CelType: "type",
}
_KIND_CHECKS: tuple[tuple[type, str], ...] = (
    (BoolType, "bool"), (bool, "bool"), (UintType, "uint"), (int, "int"), (float, "double"),
    (str, "string"), (bytes, "bytes"), (list, "list"), (Mapping, "map"), (datetime, "timestamp"),
    (timedelta, "duration"),
)
_NUMBERS = {"int", "uint", "double"}
_ORDERED = {"bool", "string", "bytes", "timestamp", "duration"}
MISSING = object()  # what lookup() returns for an absent key


def kind_of(value: Any) -> str:
    """The CEL kind of a celpy or plain Python value ("int", "map", ...)."""
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = next((k for t, k in _KIND_CHECKS if isinstance(value, t)), type(value).__name__)
    return kind


def to_cel(value: Any) -> Any:
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
        return ListType([to_cel(item) for item in value])
    if isinstance(value, Mapping):
        return MapType({to_cel(key): to_cel(item) for key, item in value.items()})
    if isinstance(value, datetime):
        return TimestampType(value if value.tzinfo else value.replace(tzinfo=UTC))
    if isinstance(value, timedelta):
        return DurationType(value)
    raise TypeError(f"unsupported value of type {type(value).__name__}")


def to_plain(value: Any) -> Any:
    """A celpy value as plain Python; an error nested in a list or map is raised."""
    if isinstance(value, CELEvalError):
        raise value
    kind = kind_of(value)
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
        return [to_plain(item) for item in value]
    if kind == "map":
        return {to_plain(key): to_plain(item) for key, item in value.items()}
    if kind == "timestamp":
        v = value.astimezone(UTC)
        return datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, UTC)
    if kind == "duration":
        return timedelta(days=value.days, seconds=value.seconds, microseconds=value.microseconds)
    if kind == "type":
        return value.name
    return value


def _number(value: Any) -> int | float:
    return float(value) if kind_of(value) == "double" else int(value)


def _equal(a: Any, b: Any) -> bool:
    ka, kb = kind_of(a), kind_of(b)
    if ka in _NUMBERS and kb in _NUMBERS:
        return _number(a) == _number(b)
    if ka != kb:
        return False
    if ka == "list":
        return len(a) == len(b) and all(map(_equal, a, b))
    if ka == "map":
        return len(a) == len(b) and all(
            (other := lookup(b, key)) is not MISSING and _equal(item, other) for key, item in a.items()
        )
    return bool(to_plain(a) == to_plain(b))


def lookup(mapping: Any, key: Any) -> Any:
    """The item under ``key`` by CEL equality (``1 == 1u == 1.0``), or ``MISSING``."""
    if isinstance(key, str):  # the common case: JSON object keys
        try:
            return dict.get(mapping, key, MISSING)
        except TypeError:
            pass
    return next((item for k, item in mapping.items() if _equal(k, key)), MISSING)


def first_error(*values: Any) -> CELEvalError | None:
    """The first of ``values`` that is an evaluation error, or None."""
    return next((v for v in values if isinstance(v, CELEvalError)), None)


def no_overload(name: str, *args: Any) -> CELEvalError:
    """The error for ``name`` applied to arguments of kinds it has no overload for."""
    return CELEvalError(f"no matching overload for {name}({', '.join(map(kind_of, args))})")


def _relation(name: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Result]:
    def run(a: Any, b: Any) -> Result:
        ka, kb = kind_of(a), kind_of(b)
        if ka in _NUMBERS and kb in _NUMBERS:  # int, uint and double compare by value at run time
            return BoolType(compare(_number(a), _number(b)))
        if ka == kb and ka in _ORDERED:
            return BoolType(compare(to_plain(a), to_plain(b)))
        return first_error(a, b) or no_overload(name, a, b)

    return run


def _in(item: Any, container: Any) -> Result:
    kind = kind_of(container)
    if first_error(item, container) or kind not in ("list", "map"):
        return first_error(item, container) or no_overload("@in", item, container)
    if kind == "list":
        return BoolType(any(_equal(item, element) for element in container))
    return BoolType(lookup(container, item) is not MISSING)


def index(container: Any, key: Any) -> Result:
    """``container[key]``: a missing map key or an index out of range is an error."""
    kind, key_kind = kind_of(container), kind_of(key)
    if first_error(container, key):
        return first_error(container, key)
    if kind == "map":
        item = lookup(container, key)
        shown = f'"{key}"' if key_kind == "string" else str(to_plain(key))
        return CELEvalError(f"no such key: {shown}") if item is MISSING else item
    if kind == "list" and key_kind in _NUMBERS and float(key).is_integer():
        if 0 <= int(key) < len(container):
            return container[int(key)]  # type: ignore[no-any-return]
        return CELEvalError(f"index {int(key)} out of range for a list of size {len(container)}")
    return no_overload("_[_]", container, key)


def operator_functions() -> dict[str, Callable[..., Result]]:
    """The operators that dispatch on run-time kinds rather than through the signature table."""
    return {
        "_==_": lambda a, b: first_error(a, b) or BoolType(_equal(a, b)),
        "_!=_": lambda a, b: first_error(a, b) or BoolType(not _equal(a, b)),
        "_<_": _relation("_<_", operator.lt), "_<=_": _relation("_<=_", operator.le),
        "_>_": _relation("_>_", operator.gt), "_>=_": _relation("_>=_", operator.ge),
        "_in_": _in, "_[_]": index,
    }
