"""OpenAPI operations to HTTP operations: each included operation becomes a tool with its input schema.

    operationId            -> tool name (else ``{method}_{path}``), sanitized to ^[a-zA-Z0-9_-]{1,64}$
    summary + description  -> description (summary also the title)
    path + query params    -> top-level input properties; header/cookie params are not exposed
    JSON request body      -> an object's properties merged at top level, anything else under ``body``
    GET / DELETE           -> readOnlyHint / destructiveHint, overridden by ``x-mcp-annotations``

Every problem in the document is collected and raised together (``ConfigError``, naming file:line:col or,
for JSON, the JSON pointer). ``openapi.py`` builds the upstream from what this returns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError
from gateway.core.globs import glob_match
from gateway.upstreams.base import UpstreamTool
from gateway.upstreams.http import HttpOperation
from gateway.upstreams.openapi_refs import LITERAL_KEYS, Bad, Resolver, Where
from gateway.upstreams.openapi_spec import SpecBundle

__all__ = ["BODY", "operations"]

BODY = "body"  # the argument that holds a request body that is not an object
_METHODS = ("get", "post", "put", "patch", "delete")
_FORM = "application/x-www-form-urlencoded"
_NAME_MAX = 64
_UNSAFE_NAME = re.compile(r"[^a-zA-Z0-9_-]+")
_UNSAFE_PARAM = re.compile(r"[^A-Za-z0-9_]+")
_PATH_PLACEHOLDER = re.compile(r"\{([^}]+)\}")
_METHOD_HINTS: dict[str, dict[str, Any]] = {"get": {"readOnlyHint": True}, "delete": {"destructiveHint": True}}


class _Body(NamedTuple):
    """What a JSON request body adds to the input schema."""

    properties: dict[str, Any]
    required: list[str]
    additional: Any = None  # the object's additionalProperties, when it says
    wrapped: bool = False  # the body is the ``body`` argument itself, not the remaining arguments
    form: bool = False  # sent as application/x-www-form-urlencoded


def operations(bundle: SpecBundle, include: Sequence[str],
               exclude: Sequence[str]) -> list[tuple[HttpOperation, bool]]:
    """(operation, whether its body is the ``body`` argument) per included operation."""
    doc = bundle.root
    paths = doc.data.get("paths") if isinstance(doc.data, dict) else None
    problems: list[Diagnostic] = []
    found: list[tuple[HttpOperation, bool]] = []
    seen: dict[str, str] = {}

    def report(bad: Bad) -> None:
        pos = doc.position(bad.where)
        # A JSON document has no positions (line 1 for everything): its JSON pointer says where instead.
        message = bad.message if doc.positions else f"{bad.message} (at {_pointer(bad.where)})"
        problems.append(Diagnostic(bad.code, message, doc.file, pos.line, pos.column, hint=bad.hint))

    for template, item in (paths or {}).items() if isinstance(paths, dict) else ():
        try:
            item = Resolver(bundle, ("paths", template)).target(item)
        except Bad as bad:
            report(bad)
            continue
        if not isinstance(item, dict):
            continue
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            where: Where = ("paths", template, method)
            op_id = op.get("operationId")
            derived = f"{method}_{str(template).strip('/')}"
            label = op_id if isinstance(op_id, str) and op_id else derived
            name = _tool_name(label) or _tool_name(derived)
            if not _selected({label, name}, include, exclude):
                continue
            if name in seen:
                report(Bad(where, "openapi-duplicate-tool",
                            f"{method.upper()} {template} and {seen[name]} both become tool {name!r}",
                            "give the operations distinct operationIds, or exclude one"))
                continue
            seen[name] = f"{method.upper()} {template}"
            try:
                found.append(_operation(bundle, name, method, str(template), item, op, where))
            except Bad as bad:
                report(bad)
    if problems:
        raise ConfigError(problems)
    return found


def _pointer(where: Where) -> str:
    """``where`` as a JSON pointer (RFC 6901), as it would be written in a $ref."""
    return "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in where)


def _selected(names: set[str], include: Sequence[str], exclude: Sequence[str]) -> bool:
    def hit(patterns: Sequence[str]) -> bool:
        return any(glob_match(n, p) for n in names for p in patterns)

    return hit(include) and not hit(exclude)


def _tool_name(label: str) -> str:
    return _UNSAFE_NAME.sub("_", label).strip("_")[:_NAME_MAX]


def _operation(bundle: SpecBundle, name: str, method: str, template: str, item: dict[str, Any],
               op: dict[str, Any], where: Where) -> tuple[HttpOperation, bool]:
    resolver = Resolver(bundle, where)
    label = f"operation {name} ({method.upper()} {template})"
    properties: dict[str, Any] = {}
    required: list[str] = []
    query: list[str] = []
    path = template

    def add(arg: str, schema: Any, needed: bool) -> None:
        if arg in properties:
            raise Bad(where, "openapi-name-clash", f"{label}: two parameters are both named {arg!r}",
                       "rename one of them in the document")
        properties[arg] = schema
        if needed:
            required.append(arg)

    params = _parameters(resolver, item, op)
    in_path = {p.get("name"): p for p in params if p.get("in") == "path"}
    for raw in _PATH_PLACEHOLDER.findall(template):
        # A path argument must be a name HttpUpstream's placeholders accept; an undeclared one is a string.
        arg = _UNSAFE_PARAM.sub("_", raw)
        arg = arg if re.match(r"[A-Za-z_]", arg) else f"p_{arg}"
        path = path.replace("{" + raw + "}", "{" + arg + "}")
        param = in_path.get(raw)
        add(arg, _parameter_schema(param) if param else {"type": "string"}, True)
    for param in params:  # header and cookie parameters are the gateway's to set, not the agent's
        if param.get("in") == "query" and isinstance(param.get("name"), str):
            query.append(param["name"])
            add(param["name"], _parameter_schema(param), param.get("required") is True)
    body = _request_body(resolver, op, name, label, where) if method != "get" else None
    if body is not None:
        clash = sorted(set(body.properties) & set(properties))
        if clash:
            raise Bad(where, "openapi-name-clash",
                       f"{label}: body field(s) {', '.join(clash)} clash with a path or query parameter",
                       "rename the parameter or the body field in the document, or exclude the operation")
        properties.update(body.properties)
        required.extend(r for r in body.required if r not in required)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if body is not None and body.additional is not None:
        schema["additionalProperties"] = body.additional
    summary, details = (str(op.get(k) or "").strip() for k in ("summary", "description"))
    description = "\n\n".join(dict.fromkeys(t for t in (summary, details) if t))
    annotations: dict[str, Any] = _METHOD_HINTS.get(method, {})
    extension = op.get("x-mcp-annotations")
    if extension is not None and not isinstance(extension, dict):
        raise Bad((*where, "x-mcp-annotations"), "openapi-annotations",
                   f"{label}: x-mcp-annotations must be a mapping",
                   "e.g. x-mcp-annotations: {idempotentHint: true}")
    tool = UpstreamTool(name, description, schema, summary or None, {**annotations, **(extension or {})})
    operation = HttpOperation.build(tool, method.upper(), path, tuple(query), body=body is not None,
                                    form=body is not None and body.form)
    return operation, body is not None and body.wrapped


def _parameters(resolver: Resolver, item: dict[str, Any], op: dict[str, Any]) -> list[dict[str, Any]]:
    """Path-level parameters overridden by the operation's own, by (name, in)."""
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for level in (item.get("parameters"), op.get("parameters")):
        for param in level if isinstance(level, list) else ():
            param = resolver.target(param)
            if isinstance(param, dict):
                found[(param.get("name"), param.get("in"))] = param
    return [resolver.schema(p) for p in found.values()]


def _parameter_schema(param: dict[str, Any]) -> Any:
    schema = param.get("schema")
    if schema is None:  # `content` instead of `schema`: one media type holds it
        media = next(iter(_mapping(param.get("content")).values()), None)
        schema = _mapping(media).get("schema", {})
    if isinstance(schema, dict) and isinstance(param.get("description"), str) and "description" not in schema:
        schema = {**schema, "description": param["description"]}
    return schema


def _request_body(resolver: Resolver, op: dict[str, Any], name: str, label: str, where: Where) -> _Body | None:
    """What the JSON (or form) request body adds to the input schema; None when there is no body."""
    body = resolver.target(op.get("requestBody"))
    if not isinstance(body, dict):
        return None
    content = _mapping(body.get("content"))
    json_type = next((t for t in content if _is_json(t)), None)
    # A form is a flat object of fields, so it is sent only when its schema is one.
    form_type = next((t for t in content if t.split(";")[0].strip().lower() == _FORM), None)
    chosen = json_type or form_type
    schema = _writable(resolver.schema(_mapping(content[chosen]).get("schema", {}))) if chosen else None
    shape = _object_shape(schema)
    if json_type is None and (form_type is None or shape is None):
        raise Bad((*where, "requestBody"), "openapi-body",
                  f"{label}: the request body is not JSON ({', '.join(content) or 'no content'})",
                  "the gateway sends JSON bodies and flat urlencoded forms only;"
                  f" leave the operation out with exclude: [{name}]")
    if shape is None:
        return _Body({BODY: schema}, [BODY] if body.get("required") is True else [], wrapped=True)
    # An optional body whose schema requires fields still tells the agent what a useful body holds.
    return _Body(shape.properties, shape.required, shape.additional, form=json_type is None)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_json(media_type: str) -> bool:
    kind = media_type.split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json") or kind == "*/*"


def _object_shape(schema: Any) -> _Body | None:
    """An object schema's properties, required and additionalProperties, ``allOf`` merged; else None."""
    if not isinstance(schema, dict) or any(k in schema for k in ("oneOf", "anyOf", "not")):
        return None
    kind = schema.get("type")
    if kind not in (None, "object") or (kind is None and "properties" not in schema and "allOf" not in schema):
        return None
    props = dict(schema.get("properties") or {})
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    extra = schema.get("additionalProperties")
    for part in schema.get("allOf") or []:
        sub = _object_shape(part)
        if sub is None:
            return None
        props.update(sub.properties)
        required.extend(r for r in sub.required if r not in required)
        extra = sub.additional if extra is None else extra
    return _Body(props, required, extra)


def _writable(schema: Any) -> Any:
    """The schema without ``readOnly`` properties, which a client never sends."""
    if isinstance(schema, list):
        return [_writable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k in LITERAL_KEYS else _writable(v)) for k, v in schema.items() if k != "properties"}
    props = schema.get("properties")
    if isinstance(props, dict):
        gone = {k for k, v in props.items() if isinstance(v, dict) and v.get("readOnly") is True}
        out["properties"] = {k: _writable(v) for k, v in props.items() if k not in gone}
        if gone and isinstance(out.get("required"), list):
            out["required"] = [r for r in out["required"] if r not in gone]
    return out


