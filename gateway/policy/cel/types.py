"""Static types of the typed environment: the checker's type terms plus object types with fields.

A type is a name (``"int"``, ``"string"``, ``"dyn"`` ...), ``("list", T)``, ``("map", K, V)`` or an
``ObjectType``: a map whose keys are known (``principal``, a tool's ``args`` from its input schema).
Object types exist only at compile time; at run time every one of them is a plain map, so the
engines evaluate exactly what they did before and a decision costs nothing more.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DYN", "DYN_MAP", "TYPE_VARIABLES", "ObjectType", "compatible", "fmt_type", "join_types", "substitute",
           "suggestion", "type_of_value", "unify"]

DYN = "dyn"
DYN_MAP = ("map", "string", DYN)
# The type variables of overload signatures (``("list", "A")``), bound by ``unify``.
TYPE_VARIABLES = ("A", "B")


@dataclass(frozen=True, slots=True, eq=False)
class ObjectType:
    """A map with known keys: selecting any other key is a load error (unless ``open``).

    Two object types are the same type only when they are the same object (two schemas' ``repo``
    may share a name and differ in fields), so joining different ones gives dyn.
    """

    name: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()  # keys that may be absent: reading one without has() warns
    open: bool = False  # other keys may exist (typed ``rest``): JSON Schema additionalProperties
    rest: Any = DYN
    # Keys this value happens not to have may still be probed (the config's env, which differs per
    # deployment while a policy pack does not): has() on them is fine, and a read only warns.
    probe: bool = False

    def field_type(self, key: str) -> Any | None:
        """The type of ``key``, or None when the object cannot have it."""
        if key in self.fields:
            return self.fields[key]
        return self.rest if self.open else None


def fmt_type(t: Any) -> str:
    """A type as CEL writes it: ``map(string, int)``, ``list(dyn)``, ``principal``."""
    if isinstance(t, ObjectType):
        return t.name
    return f"{t[0]}({', '.join(map(fmt_type, t[1:]))})" if isinstance(t, tuple) else str(t)


def join_types(types: Iterable[Any]) -> Any:
    """One type for several: that type when all agree, else dyn."""
    found = list(types)
    return found[0] if found and all(t == found[0] for t in found) else DYN


def suggestion(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def type_of_value(value: Any, name: str = "value") -> Any:
    """The static type of a plain JSON-like value (a config's ``env``): maps become objects."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if value is None:
        return DYN  # null now may be anything later
    if isinstance(value, list):
        return ("list", join_types(type_of_value(v) for v in value)) if value else ("list", DYN)
    if isinstance(value, Mapping):
        return ObjectType(name, {str(k): type_of_value(v, f"{name}.{k}") for k, v in value.items()}, probe=True)
    return DYN


# --- unification, for the checker: object types are the maps they are at run time ---

def _erase(t: Any) -> Any:
    """Object types as the maps they are at run time (for operators and functions)."""
    if isinstance(t, ObjectType):
        return DYN_MAP
    return tuple(_erase(part) for part in t) if isinstance(t, tuple) else t


def compatible(a: Any, b: Any) -> bool:
    if a == b or DYN in (a, b):
        return True
    if isinstance(a, ObjectType) or isinstance(b, ObjectType):
        return compatible(_erase(a), _erase(b))
    return (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] and len(a) == len(b)
            and all(map(compatible, a[1:], b[1:])))


def unify(param: Any, arg: Any, bound: dict[str, Any]) -> bool:
    if param in TYPE_VARIABLES:
        if param not in bound:
            bound[param] = arg
        elif not compatible(bound[param], arg):
            return False
        elif bound[param] != arg:
            bound[param] = DYN
        return True
    if DYN in (param, arg):
        return True
    if isinstance(arg, ObjectType):
        arg = DYN_MAP
    if isinstance(param, tuple):
        return (isinstance(arg, tuple) and param[0] == arg[0] and len(param) == len(arg)
                and all(unify(p, a, bound) for p, a in zip(param[1:], arg[1:], strict=True)))
    return bool(param == arg)


def substitute(t: Any, bound: dict[str, Any]) -> Any:
    if isinstance(t, tuple):
        return tuple(substitute(part, bound) for part in t)
    return bound.get(t, DYN) if t in TYPE_VARIABLES else t
