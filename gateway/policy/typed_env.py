"""The typed environment: the declared type of every variable an expression may read.

``tool``, ``principal``, ``session``, ``call``, ``result``, ``usage``, ``request``, ``resource`` and ``prompt``
have fixed fields (the maps
``gateway.policy.call`` builds); ``env`` is typed from the config's values when a config is given;
``args`` from the input schemas of the catalog tools a rule's ``tools:`` match; ``variables`` from
their expressions. Everything unknown stays dynamic. Types are checked at load time only: at run
time every value is still a plain map, so decisions cost exactly what they did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.catalog import Catalog
from gateway.policy.cel.types import DYN, DYN_MAP, ObjectType, fmt_type, join_types, suggestion, type_of_value

__all__ = ["HISTORY_ENTRY", "RESULT", "TypeEnvironment", "args_type", "flow_fields", "rewrite_problem",
           "schema_type"]

_STRING_LIST = ("list", "string")
_COUNTS = ("map", "string", "int")

TOOL = ObjectType("tool", {
    "name": "string", "upstream": "string", "title": "string", "description": "string", "schema_text": "string",
    "pinned": "bool",  # it matches the tools lock (false without one)
    # MCP's four hints always have a value (its defaults fill the gaps); other annotations: tool.annotations["x"]
    "annotations": ObjectType("tool.annotations", {
        "title": "string", "readOnlyHint": "bool", "destructiveHint": "bool", "idempotentHint": "bool",
        "openWorldHint": "bool"}, optional=frozenset({"title"})),
})
# kind: "key", "jwt" or "anonymous"; issuer: the token's verified iss ("" unless kind is "jwt")
PRINCIPAL = ObjectType("principal", {"id": "string", "groups": _STRING_LIST, "claims": DYN, "issuer": "string",
                                     "kind": "string"})
# One of the run's last calls (gateway/policy/flow.py's history_entry): no arguments.
HISTORY_ENTRY = ObjectType("session.history entry", {
    "tool": "string", "verdict": "string", "rule": "string", "labels": _STRING_LIST, "time": "string"})
_SESSION_FIELDS = {
    "id": "string", "implicit": "bool", "calls": "int", "calls_by_tool": _COUNTS, "rejected": "int",
    "started_at": "string", "labels": _STRING_LIST, "history": ("list", HISTORY_ENTRY)}
CALL = ObjectType("call", {"id": "string", "iteration": "int", "time": "string"})
RESULT = ObjectType("result", {
    "is_error": "bool", "text": "string", "structured": DYN, "content": ("list", DYN_MAP)})
# What is decided: request.kind is "tool", "resource" or "prompt"; the item maps' fields are "" for other kinds.
REQUEST = ObjectType("request", {"kind": "string", "method": "string"})
RESOURCE = ObjectType("resource", dict.fromkeys(
    ("uri", "upstream", "upstream_uri", "title", "description", "mimeType"), "string"))
PROMPT = ObjectType("prompt", dict.fromkeys(("name", "upstream", "upstream_name", "title", "description"), "string"))
_WINDOW_FIELDS = {"calls": "int", "calls_by_tool": _COUNTS, "rejected": "int"}
# A tally's value by its kind: a sum is a double, a distinct count an int.
_TALLY_TYPES = {"sum": "double", "distinct": "int"}


def flow_fields(owner: str, tallies: Mapping[str, str]) -> dict[str, Any]:
    """``tallies`` and ``seen`` of a run or a usage window: objects with exactly the set's tally ids."""
    return {
        "tallies": ObjectType(f"{owner}.tallies", {k: _TALLY_TYPES[v] for k, v in tallies.items()}),
        "seen": ObjectType(f"{owner}.seen", {k: _STRING_LIST for k, v in tallies.items() if v == "distinct"}),
    }


@dataclass(frozen=True)
class TypeEnvironment:
    """What is known beyond the fixed fields: the config's ``env`` and usage windows, the tool catalog."""

    env: Mapping[str, Any] | None = None  # the config's env values; None: env is dynamic
    usage_windows: Sequence[str] | None = None  # the config's window names; None: any name
    catalog: Catalog | None = None  # the exposed tools; None: args is dynamic
    tallies: Mapping[str, str] = field(default_factory=dict)  # the set's tally ids and kinds ("sum", "distinct")
    _base: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def base(self) -> dict[str, Any]:
        """The types of every variable but ``args``, ``original_args`` and ``variables``."""
        if not self._base:
            window = ObjectType("usage window", {**_WINDOW_FIELDS, **flow_fields("usage.WINDOW", self.tallies)})
            usage: Any = ("map", "string", window)
            if self.usage_windows is not None:
                usage = ObjectType("usage", dict.fromkeys(self.usage_windows, window))
            session = ObjectType("session", {**_SESSION_FIELDS, **flow_fields("session", self.tallies)})
            self._base.update(
                tool=TOOL, principal=PRINCIPAL, session=session, call=CALL, result=RESULT, usage=usage,
                request=REQUEST, resource=RESOURCE, prompt=PROMPT,
                env=type_of_value(dict(self.env), "env") if self.env is not None else DYN_MAP)
        return self._base

    def for_rule(self, tools: Sequence[str] | None, variables: ObjectType, *,
                 args_known: bool = True) -> dict[str, Any]:
        """The environment of one rule's expressions (a file variable's: ``args_known=False``)."""
        args = args_type(self.catalog, tools) if args_known else DYN_MAP
        return {**self.base(), "args": args, "original_args": args, "variables": variables}


def args_type(catalog: Catalog | None, tools: Sequence[str] | None) -> Any:
    """``args`` for a rule matching ``tools``: typed when every pattern matches a catalog tool.

    Several tools: a field any of them has may be read (it is optional unless all require it);
    its type is theirs when they agree, else dyn. A pattern matching no known tool keeps args
    dynamic, since that tool's arguments are unknown (the catalog check reports the pattern).
    """
    if catalog is None:
        return DYN_MAP
    if tools is not None and any(not catalog.matching([p]) for p in tools):
        return DYN_MAP
    matched = catalog.matching(tools)
    types = [schema_type(t.input_schema, "args", t.input_schema, cache={}) for t in matched]
    if not types or not all(isinstance(t, ObjectType) for t in types):
        return DYN_MAP
    name = f"args of {matched[0].name}" if len(matched) == 1 else f"args of {len(matched)} tools"
    return _merge(name, [t for t in types if isinstance(t, ObjectType)])


def _merge(name: str, objects: list[ObjectType]) -> ObjectType:
    if len(objects) == 1:
        return ObjectType(name, objects[0].fields, objects[0].optional, objects[0].open, objects[0].rest)
    names = sorted({k for o in objects for k in o.fields})
    fields = {k: join_types(o.fields[k] for o in objects if k in o.fields) for k in names}
    optional = frozenset(k for k in names if any(k not in o.fields or k in o.optional for o in objects))
    opened = [o for o in objects if o.open]
    return ObjectType(name, fields, optional, bool(opened), join_types(o.rest for o in opened) if opened else DYN)


def schema_type(schema: Any, name: str, root: Any, seen: frozenset[str] = frozenset(),
                cache: dict[str, Any] | None = None) -> Any:
    """The static type of values valid under a JSON Schema (2020-12; local ``$ref``s followed).

    A recursive reference is typed one level deep, then dyn; each reference is typed once
    (``cache``), so a schema that reuses definitions cannot make this exponential.
    """
    if not isinstance(schema, Mapping):
        return DYN
    cache = {} if cache is None else cache
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if ref in cache:
            return cache[ref]
        target = _resolve(root, ref)
        if target is None or ref in seen:
            return DYN
        found = cache[ref] = schema_type(target, name, root, seen | {ref}, cache)
        return found
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return join_types(schema_type(s, name, root, seen, cache) for s in schema[key])
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        return schema_type(schema["allOf"][0], name, root, seen, cache)
    if "const" in schema:
        return type_of_value(schema["const"])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return join_types(type_of_value(v) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if len(kind) == 1 else None
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), Mapping)):
        return _object(schema, name, root, seen, cache)
    if kind == "array":
        return ("list", schema_type(schema.get("items"), f"{name}[]", root, seen, cache))
    # "number" stays dyn: JSON 5 arrives as an int and 5.5 as a double
    return {"string": "string", "integer": "int", "boolean": "bool", "null": "null_type"}.get(str(kind), DYN)


def _object(schema: Mapping[str, Any], name: str, root: Any, seen: frozenset[str],
            cache: dict[str, Any]) -> ObjectType:
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    extra = schema.get("additionalProperties")
    # A property the schema does not name is a typo unless the schema says other names are fine.
    opened = extra is True or isinstance(extra, Mapping) or bool(schema.get("patternProperties"))
    rest = schema_type(extra, f"{name}.*", root, seen, cache) if isinstance(extra, Mapping) else DYN
    fields = {str(k): schema_type(v, f"{name}.{k}", root, seen, cache) for k, v in props.items()}
    return ObjectType(name, fields, frozenset(k for k in fields if k not in required), opened, rest)


def _resolve(root: Any, ref: str) -> Any:
    """A local reference (``#/$defs/X``, ``#/definitions/X``) inside ``root``; None otherwise."""
    if not ref.startswith("#"):
        return None
    node = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def rewrite_problem(target: Any, path: Sequence[str | int], value: Any) -> tuple[str, str] | None:
    """(code, message) when setting ``path`` of ``target`` to a ``value`` typed value is wrong."""
    node = target
    for i, part in enumerate(path):
        where = ".".join(map(str, path[:i + 1]))
        if isinstance(node, ObjectType) and isinstance(part, str):
            found = node.field_type(part)
            if found is None:
                hint = suggestion(part, node.fields)
                return "cel-field", f"{node.name} has no field '{part}'{hint}; {where} cannot be set"
            node = found
        elif isinstance(node, tuple) and node[0] == "list" and isinstance(part, int):
            node = node[1]
        elif isinstance(node, tuple) and node[0] == "map":
            node = node[2]
        else:
            return None  # dynamic from here: known only at run time
    if _assignable(node, value):
        return None
    return "cel-type", f"{'.'.join(map(str, path))} is {fmt_type(node)}, but the expression is {fmt_type(value)}"


def _is_map(t: Any) -> bool:
    return isinstance(t, ObjectType) or (isinstance(t, tuple) and t[0] == "map")


def _assignable(want: Any, got: Any) -> bool:
    if DYN in (want, got) or want == got:
        return True
    if isinstance(want, ObjectType) or isinstance(got, ObjectType):
        return _is_map(want) and _is_map(got)
    if isinstance(want, tuple) and isinstance(got, tuple) and want[0] == got[0] and len(want) == len(got):
        return all(_assignable(w, g) for w, g in zip(want[1:], got[1:], strict=True))
    return False
