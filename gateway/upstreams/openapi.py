"""An OpenAPI 3.x upstream: every operation in the document becomes a tool on an ``HttpUpstream``.

    operationId            -> tool name (else ``{method}_{path}``), sanitized to ^[a-zA-Z0-9_-]{1,64}$
    summary + description  -> description (summary also the title)
    path + query params    -> top-level input properties; header/cookie params are not exposed
    JSON request body      -> an object's properties merged at top level, anything else under ``body``
    GET / DELETE           -> readOnlyHint / destructiveHint, overridden by ``x-mcp-annotations``

Local ``$ref``s are inlined once, when the upstream is built; a recursive schema is unrolled
``_MAX_REF_DEPTH`` references deep and is ``{}`` (any value) past that.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

import httpx2

from gateway.config.model import OpenApiUpstreamSpec
from gateway.diagnostics import Diagnostic
from gateway.errors import ConfigError
from gateway.limits import MAX_RESPONSE_BYTES
from gateway.policy.cel.functions import glob
from gateway.sourcemap import YamlDocument, load_yaml
from gateway.upstreams.base import UpstreamTool
from gateway.upstreams.http import HttpOperation, HttpUpstream

__all__ = ["load_openapi", "openapi_upstream", "operations_from_openapi"]

# $refs followed along one chain before the schema there is left as {}: deep enough for real
# models, and it is what stops a recursive schema. (Candidate for gateway/limits.py.)
_MAX_REF_DEPTH = 10
# Schema nodes inlined for one operation; past it further $refs become {}, so that a document
# whose references fan out cannot blow up into an enormous tool schema. (Candidate for limits.py.)
_MAX_SCHEMA_NODES = 20_000

_METHODS = ("get", "post", "put", "patch", "delete")
_BODY = "body"  # the argument that holds a request body that is not an object
_NAME_MAX = 64
_UNSAFE_NAME = re.compile(r"[^a-zA-Z0-9_-]+")
_UNSAFE_PARAM = re.compile(r"[^A-Za-z0-9_]+")
_PATH_PLACEHOLDER = _SERVER_VARIABLE = re.compile(r"\{([^}]+)\}")
_METHOD_HINTS: dict[str, dict[str, Any]] = {"get": {"readOnlyHint": True}, "delete": {"destructiveHint": True}}
# Values that are data, not schemas: never read as $refs or rewritten.
_LITERAL_KEYS = frozenset({"example", "examples", "default", "enum", "const"})

_Where = tuple[str | int, ...]


class _Body(NamedTuple):
    """What a JSON request body adds to the input schema."""

    properties: dict[str, Any]
    required: list[str]
    additional: Any = None  # the object's additionalProperties, when it says
    wrapped: bool = False  # the body is the ``body`` argument itself, not the remaining arguments


class _Bad(Exception):
    """One problem with the document, at a JSON path; collected into a ConfigError."""

    def __init__(self, where: _Where, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.where, self.code, self.message, self.hint = where, code, message, hint


def load_openapi(path: Path) -> dict[str, Any]:
    """The OpenAPI document at ``path`` (JSON or YAML); raises ``ConfigError`` naming file:line:col."""
    data = _read(path).data
    assert isinstance(data, dict)  # _read guarantees a mapping
    return data


def operations_from_openapi(document: dict[str, Any], include: list[str], exclude: list[str],
                            *, source: str = "<openapi>") -> list[HttpOperation]:
    """One HTTP operation per included OpenAPI operation; ``source`` names the file in errors.

    An operation whose body is not an object takes it as the ``body`` argument, which only the
    upstream from ``openapi_upstream`` unwraps (a plain ``HttpUpstream`` would send ``{"body": ...}``).
    """
    return [op for op, _ in _operations(YamlDocument(source, document), include, exclude)]


def openapi_upstream(name: str, spec: OpenApiUpstreamSpec, base_dir: Path, headers: dict[str, str],
                     client: httpx2.AsyncClient | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES,
                     ) -> HttpUpstream:
    """An ``HttpUpstream`` built from the spec file named in the config (read relative to ``base_dir``)."""
    path = Path(os.path.expanduser(spec.spec))
    doc = _read(path if path.is_absolute() else base_dir / path)
    found = _operations(doc, spec.include, spec.exclude)
    if not found:
        raise ConfigError([Diagnostic(
            "openapi-no-operations", f"upstream {name!r}: no operations left after include/exclude",
            doc.file, hint=f"include {spec.include} and exclude {spec.exclude} match no operationId")])
    base_url = spec.base_url or _server_url(doc)
    wrapped = frozenset(op.tool.name for op, wraps in found if wraps)
    return _OpenApiUpstream(name, base_url, [op for op, _ in found], headers, client, wrapped=wrapped,
                            max_response_bytes=max_response_bytes)


class _OpenApiUpstream(HttpUpstream):
    """An HTTP upstream where a non-object request body arrives as the ``body`` argument."""

    def __init__(self, name: str, base_url: str, operations: list[HttpOperation], headers: dict[str, str],
                 client: httpx2.AsyncClient | None, *, wrapped: frozenset[str],
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        super().__init__(name, base_url, operations, headers, client, max_response_bytes)
        self._wrapped = wrapped  # tool names whose body is the ``body`` argument

    def request_for(self, tool: str, arguments: dict[str, Any]) -> tuple[str, str, dict[str, Any], Any]:
        method, url, query, body = super().request_for(tool, arguments)
        if tool in self._wrapped and isinstance(body, dict):
            body = body.get(_BODY)  # absent: no body at all
        return method, url, query, body


# --- reading -------------------------------------------------------------------------------------


def _read(path: Path) -> YamlDocument:
    file = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError([Diagnostic("unreadable", f"cannot read OpenAPI spec {file}: {exc.strerror}", file,
                                      hint="check the upstream's openapi.spec path")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([Diagnostic("encoding", f"OpenAPI spec is not UTF-8: {exc.reason}", file)]) from exc
    if path.suffix.lower() == ".json":
        # JSON is parsed as JSON (YAML 1.1 reads some JSON numbers differently); its values have
        # no recorded positions, so later errors point at line 1.
        try:
            doc = YamlDocument(file, json.loads(text))
        except json.JSONDecodeError as exc:
            raise ConfigError([Diagnostic("json-syntax", f"JSON syntax error: {exc.msg}", file,
                                          exc.lineno, exc.colno)]) from exc
    else:
        try:
            parsed, problems = load_yaml(text, file)
        except RecursionError as exc:  # a self-referencing YAML alias
            raise ConfigError([Diagnostic("yaml-syntax", "YAML nests too deeply (a recursive alias?)",
                                          file)]) from exc
        if parsed is None or problems:
            raise ConfigError(problems)
        doc = parsed
    if not isinstance(doc.data, dict):
        raise ConfigError([Diagnostic("openapi-document", "an OpenAPI document must be a mapping", file)])
    version = doc.data.get("openapi")
    if not (isinstance(version, str) and version.startswith("3.")):
        pos = doc.position(("openapi",))
        raise ConfigError([Diagnostic(
            "openapi-version", f"unsupported OpenAPI version {version!r}; need 3.0 or 3.1", file,
            pos.line, pos.column, hint="convert a Swagger 2.0 document to OpenAPI 3 first")])
    return doc


def _server_url(doc: YamlDocument) -> str:
    """The first ``servers[].url``, with its variables at their defaults; must be absolute."""
    servers = doc.data.get("servers")
    server = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], dict) else {}
    raw = server.get("url")
    variables = _mapping(server.get("variables"))

    def default(m: re.Match[str]) -> str:
        var = variables.get(m.group(1))
        return str(var.get("default", m.group(0))) if isinstance(var, dict) else m.group(0)

    url = _SERVER_VARIABLE.sub(default, raw) if isinstance(raw, str) else ""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.hostname and "{" not in url:
        return url
    where: _Where = ("servers", 0, "url") if raw is not None else ("servers",)
    pos = doc.position(where)
    got = f"servers[0].url is {raw!r}" if raw is not None else "the document has no servers[].url"
    raise ConfigError([Diagnostic(
        "openapi-server", f"no absolute http(s) base URL: {got}", doc.file, pos.line, pos.column,
        hint="set base_url under the upstream's openapi config, e.g. base_url: https://api.example.com")])


# --- operations ----------------------------------------------------------------------------------


def _operations(doc: YamlDocument, include: list[str],
                exclude: list[str]) -> list[tuple[HttpOperation, bool]]:
    """(operation, whether its body is the ``body`` argument) per included operation."""
    paths = doc.data.get("paths") if isinstance(doc.data, dict) else None
    problems: list[Diagnostic] = []
    operations: list[tuple[HttpOperation, bool]] = []
    seen: dict[str, str] = {}

    def report(bad: _Bad) -> None:
        pos = doc.position(bad.where)
        problems.append(Diagnostic(bad.code, bad.message, doc.file, pos.line, pos.column, hint=bad.hint))

    for template, item in (paths or {}).items() if isinstance(paths, dict) else ():
        try:
            item = _Resolver(doc.data, ("paths", template)).target(item)
        except _Bad as bad:
            report(bad)
            continue
        if not isinstance(item, dict):
            continue
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            where: _Where = ("paths", template, method)
            op_id = op.get("operationId")
            derived = f"{method}_{str(template).strip('/')}"
            label = op_id if isinstance(op_id, str) and op_id else derived
            name = _tool_name(label) or _tool_name(derived)
            if not _selected({label, name}, include, exclude):
                continue
            if name in seen:
                report(_Bad(where, "openapi-duplicate-tool",
                            f"{method.upper()} {template} and {seen[name]} both become tool {name!r}",
                            "give the operations distinct operationIds, or exclude one"))
                continue
            seen[name] = f"{method.upper()} {template}"
            try:
                operations.append(_operation(doc.data, name, method, str(template), item, op, where))
            except _Bad as bad:
                report(bad)
    if problems:
        raise ConfigError(problems)
    return operations


def _selected(names: set[str], include: list[str], exclude: list[str]) -> bool:
    def hit(patterns: list[str]) -> bool:
        return any(glob(n, p) for n in names for p in patterns)

    return hit(include) and not hit(exclude)


def _tool_name(label: str) -> str:
    return _UNSAFE_NAME.sub("_", label).strip("_")[:_NAME_MAX]


def _operation(document: dict[str, Any], name: str, method: str, template: str, item: dict[str, Any],
               op: dict[str, Any], where: _Where) -> tuple[HttpOperation, bool]:
    resolver = _Resolver(document, where)
    label = f"operation {name} ({method.upper()} {template})"
    properties: dict[str, Any] = {}
    required: list[str] = []
    query: list[str] = []
    path = template

    def add(arg: str, schema: Any, needed: bool) -> None:
        if arg in properties:
            raise _Bad(where, "openapi-name-clash", f"{label}: two parameters are both named {arg!r}",
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
            raise _Bad(where, "openapi-name-clash",
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
        raise _Bad((*where, "x-mcp-annotations"), "openapi-annotations",
                   f"{label}: x-mcp-annotations must be a mapping",
                   "e.g. x-mcp-annotations: {idempotentHint: true}")
    tool = UpstreamTool(name, description, schema, summary or None, {**annotations, **(extension or {})})
    operation = HttpOperation.build(tool, method.upper(), path, tuple(query), body=body is not None)
    return operation, body is not None and body.wrapped


def _parameters(resolver: _Resolver, item: dict[str, Any], op: dict[str, Any]) -> list[dict[str, Any]]:
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


def _request_body(resolver: _Resolver, op: dict[str, Any], name: str, label: str, where: _Where) -> _Body | None:
    """What the JSON request body adds to the input schema; None when there is no body."""
    body = resolver.target(op.get("requestBody"))
    if not isinstance(body, dict):
        return None
    content = _mapping(body.get("content"))
    json_type = next((t for t in content if _is_json(t)), None)
    if json_type is None:
        raise _Bad((*where, "requestBody"), "openapi-body",
                   f"{label}: the request body is not JSON ({', '.join(content) or 'no content'})",
                   f"the gateway sends JSON bodies only; leave the operation out with exclude: [{name}]")
    schema = _writable(resolver.schema(_mapping(content[json_type]).get("schema", {})))
    shape = _object_shape(schema)
    if shape is None:
        return _Body({_BODY: schema}, [_BODY] if body.get("required") is True else [], wrapped=True)
    # An optional body whose schema requires fields still tells the agent what a useful body holds.
    return shape


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
    out = {k: (v if k in _LITERAL_KEYS else _writable(v)) for k, v in schema.items() if k != "properties"}
    props = schema.get("properties")
    if isinstance(props, dict):
        gone = {k for k, v in props.items() if isinstance(v, dict) and v.get("readOnly") is True}
        out["properties"] = {k: _writable(v) for k, v in props.items() if k not in gone}
        if gone and isinstance(out.get("required"), list):
            out["required"] = [r for r in out["required"] if r not in gone]
    return out


# --- references ----------------------------------------------------------------------------------


@dataclass
class _Resolver:
    """Inlines local ``$ref``s for one operation, within the depth and size limits."""

    document: dict[str, Any]
    where: _Where
    nodes: int = 0

    def target(self, node: Any) -> Any:
        """A ``$ref`` object's target (followed until it is not a reference); other nodes as they are."""
        for _ in range(_MAX_REF_DEPTH):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            node = self._lookup(node["$ref"])
        return {}

    def schema(self, node: Any, depth: int = 0) -> Any:
        """``node`` with every ``$ref`` inside inlined and OpenAPI 3.0 keywords made JSON Schema."""
        self.nodes += 1
        if isinstance(node, list):
            return [self.schema(v, depth) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            if depth >= _MAX_REF_DEPTH or self.nodes > _MAX_SCHEMA_NODES:
                return {}
            target = self._lookup(ref)
            siblings = {k: v for k, v in node.items() if k != "$ref"}  # OpenAPI 3.1 allows these
            return self.schema({**target, **siblings} if isinstance(target, dict) else target, depth + 1)
        out = {k: (v if k in _LITERAL_KEYS else self.schema(v, depth)) for k, v in node.items()}
        return _json_schema(out)

    def _lookup(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise _Bad(self.where, "openapi-ref", f"only local $refs (#/...) are supported, got {ref!r}",
                       "bundle the document into one file first, e.g. `redocly bundle`")
        node: Any = self.document
        for raw in ref[2:].split("/"):
            key = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise _Bad(self.where, "openapi-ref", f"$ref {ref!r} points at nothing",
                           "check the component's name and path")
        return node


def _json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's ``nullable`` and boolean ``exclusiveMinimum/Maximum`` in JSON Schema's terms."""
    if node.get("nullable") is True and isinstance(node.get("type"), str):
        node = {k: v for k, v in node.items() if k != "nullable"}
        node["type"] = [node["type"], "null"]
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(exclusive), bool):
            node = dict(node)
            if node.pop(exclusive) and bound in node:
                node[exclusive] = node.pop(bound)
    return node

