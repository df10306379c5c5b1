"""Swagger 2.0 in the OpenAPI 3.0 shape the rest of the OpenAPI upstream reads.

    host + basePath + schemes      -> servers (no schemes: ``//host/base``, resolved against a spec URL)
    in: body parameter             -> requestBody, one media type per ``consumes``
    in: formData parameters        -> requestBody with a form media type (an object of the fields)
    other parameters' type/format  -> their ``schema``
    definitions / parameters / responses -> components.schemas / parameters / responses, $refs rewritten
    responses[].schema             -> responses[].content, one media type per ``produces``

Only what becomes tools is converted faithfully; security definitions and the like are dropped.
"""

from __future__ import annotations

from typing import Any

__all__ = ["convert_swagger2"]

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")
_LITERAL_KEYS = frozenset({"example", "examples", "default", "enum", "const", "x-example"})
# A non-body parameter's own keys that are JSON Schema keywords (Swagger 2.0 puts them on the parameter).
_SCHEMA_KEYS = ("type", "format", "items", "enum", "default", "minimum", "maximum", "exclusiveMinimum",
                "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems", "uniqueItems",
                "multipleOf")
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
# Types hand-written specs use that JSON Schema does not know (httpbin's spec says "int").
_TYPE_ALIASES = {"int": "integer", "long": "integer", "float": "number", "double": "number", "str": "string",
                 "bool": "boolean", "dict": "object", "list": "array"}
_REF_PREFIXES = {"#/definitions/": "#/components/schemas/", "#/parameters/": "#/components/parameters/",
                 "#/responses/": "#/components/responses/"}
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def convert_swagger2(doc: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.0 document with the operations, schemas and servers of a Swagger 2.0 one."""
    consumes = _strings(doc.get("consumes")) or ["application/json"]
    produces = _strings(doc.get("produces")) or ["application/json"]
    shared = _mapping(doc.get("parameters"))
    out: dict[str, Any] = {"openapi": "3.0.3", "info": doc.get("info", {}), "servers": _servers(doc)}
    out.update({k: v for k, v in doc.items() if k.startswith("x-") or k in ("tags", "externalDocs")})
    components: dict[str, Any] = {}
    if isinstance(doc.get("definitions"), dict):
        components["schemas"] = {k: _schema(v) for k, v in doc["definitions"].items()}
    plain = {k: _parameter(p) for k, p in shared.items()
             if isinstance(p, dict) and p.get("in") not in ("body", "formData")}
    if plain:
        components["parameters"] = plain
    if isinstance(doc.get("responses"), dict):
        components["responses"] = {k: _response(r, produces) for k, r in doc["responses"].items()}
    if components:
        out["components"] = components
    paths: dict[str, Any] = {}
    for template, item in _mapping(doc.get("paths")).items():
        if not isinstance(item, dict) or "$ref" in item:
            paths[template] = _rewrite(item)
            continue
        converted: dict[str, Any] = {k: v for k, v in item.items() if k not in (*_METHODS, "parameters")}
        for method in _METHODS:
            if isinstance(item.get(method), dict):
                converted[method] = _operation(item[method], _params(item, item[method], shared), consumes, produces)
        paths[template] = converted
    out["paths"] = paths
    return out


def _servers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    host, base = doc.get("host"), doc.get("basePath")
    base = base if isinstance(base, str) else ""
    if not isinstance(host, str) or not host:
        return [{"url": base or "/"}]  # relative: a spec URL gives the origin, a file needs base_url
    schemes = [s for s in _strings(doc.get("schemes")) if s in ("http", "https")]
    return [{"url": f"{s}://{host}{base}"} for s in schemes] or [{"url": f"//{host}{base}"}]


def _params(item: dict[str, Any], op: dict[str, Any], shared: dict[str, Any]) -> list[dict[str, Any]]:
    """Path-level parameters overridden by the operation's, local ``#/parameters/`` refs inlined."""
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for level in (item.get("parameters"), op.get("parameters")):
        for param in level if isinstance(level, list) else ():
            ref = param.get("$ref") if isinstance(param, dict) else None
            if isinstance(ref, str) and ref.startswith("#/parameters/"):
                param = shared.get(ref.removeprefix("#/parameters/"), param)
            if isinstance(param, dict):
                found[(param.get("name"), param.get("in"))] = param
    return list(found.values())


def _operation(op: dict[str, Any], params: list[dict[str, Any]], consumes: list[str],
               produces: list[str]) -> dict[str, Any]:
    out = {k: v for k, v in op.items() if k not in ("parameters", "consumes", "produces", "responses", "schemes")}
    media = _strings(op.get("consumes")) or consumes
    form: dict[str, Any] = {}
    form_required: list[str] = []
    kept: list[dict[str, Any]] = []
    for param in params:
        where = param.get("in")
        if where == "body":
            out["requestBody"] = {"content": {m: {"schema": _schema(param.get("schema", {}))} for m in media},
                                  "required": param.get("required") is True,
                                  **({"description": param["description"]} if "description" in param else {})}
        elif where == "formData" and isinstance(param.get("name"), str):
            form[param["name"]] = _parameter(param)["schema"]
            if param.get("required") is True:
                form_required.append(param["name"])
        else:
            kept.append(_parameter(param) if "$ref" not in param else _rewrite(param))
    if form:
        kind = next((m for m in media if m in _FORM_TYPES), _FORM_TYPES[0])
        schema: dict[str, Any] = {"type": "object", "properties": form}
        if form_required:
            schema["required"] = form_required
        out["requestBody"] = {"content": {kind: {"schema": schema}}}
    if kept:
        out["parameters"] = kept
    responses = _mapping(op.get("responses"))
    out["responses"] = {code: _response(r, _strings(op.get("produces")) or produces) for code, r in responses.items()}
    return out


def _parameter(param: dict[str, Any]) -> dict[str, Any]:
    """A non-body parameter with its type keywords moved under ``schema``."""
    out: dict[str, Any] = {k: param[k] for k in ("name", "in", "description", "required") if k in param}
    if isinstance(param.get("schema"), dict):  # not Swagger 2.0, but some hand-written specs do it
        out["schema"] = _schema(param["schema"])
    else:
        # Swagger 2.0 requires a type; where a hand-written spec leaves it out, the value travels as text.
        out["schema"] = _schema({"type": "string", **{k: param[k] for k in _SCHEMA_KEYS if k in param}})
    return out


def _response(response: Any, produces: list[str]) -> Any:
    if not isinstance(response, dict) or "$ref" in response:
        return _rewrite(response)
    out = {k: v for k, v in response.items() if k not in ("schema", "examples", "headers")}
    out.setdefault("description", "")
    if "schema" in response:
        out["content"] = {m: {"schema": _schema(response["schema"])} for m in produces}
    return out


def _schema(node: Any) -> Any:
    """A Swagger 2.0 schema as OpenAPI 3.0 reads it: refs rewritten, ``x-nullable`` and ``file`` mapped."""
    if isinstance(node, list):
        return [_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _LITERAL_KEYS:
            out[key] = value
        elif key == "$ref" and isinstance(value, str):
            out[key] = _ref(value)
        elif key == "x-nullable":
            out["nullable"] = value
        elif key == "type" and isinstance(value, str):
            if value == "file":
                out.update(type="string", format="binary")
            elif value in _JSON_TYPES or value in _TYPE_ALIASES:
                out[key] = _TYPE_ALIASES.get(value, value)
            # an unknown type name says nothing a validator could use: left out
        else:
            out[key] = _schema(value)
    return out


def _rewrite(node: Any) -> Any:
    """``node`` with its local $refs pointing at the converted components."""
    return _schema(node)


def _ref(ref: str) -> str:
    for old, new in _REF_PREFIXES.items():
        if ref.startswith(old):
            return new + ref.removeprefix(old)
    return ref


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
