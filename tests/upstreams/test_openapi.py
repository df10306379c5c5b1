"""OpenAPI documents become HTTP tools: names, schemas, selection, servers, errors, and real calls."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml
from starlette.types import ASGIApp

from gateway.config.load import load_config
from gateway.config.model import OpenApiUpstreamSpec
from gateway.core.errors import ConfigError, InvalidArgumentsError
from gateway.upstreams.http import HttpOperation
from gateway.upstreams.openapi import load_openapi, openapi_upstream, operations_from_openapi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openapi"
PETSTORE = EXAMPLE / "petstore.yaml"
TIMEOUT = 5.0

# Fixture types (tests/conftest.py hands these out).
Serve = Callable[[ASGIApp], Awaitable[str]]
Write = Callable[[str, str], Path]


def petstore_app_module() -> ModuleType:
    """examples/openapi/petstore_app.py, which is a script rather than a package module."""
    spec = importlib.util.spec_from_file_location("petstore_app", EXAMPLE / "petstore_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def by_name(ops: list[HttpOperation]) -> dict[str, HttpOperation]:
    return {op.tool.name: op for op in ops}


def petstore_ops(include: list[str] | None = None, exclude: list[str] | None = None) -> dict[str, HttpOperation]:
    return by_name(operations_from_openapi(load_openapi(PETSTORE), include or ["*"], exclude or []))


def document(paths: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": paths, **extra}


def only(doc: dict[str, Any]) -> HttpOperation:
    ops = operations_from_openapi(doc, ["*"], [])
    assert len(ops) == 1
    return ops[0]


def upstream_spec(path: Path, **fields: Any) -> OpenApiUpstreamSpec:
    return OpenApiUpstreamSpec.model_validate({"spec": str(path), **fields})


def config_error(excinfo: pytest.ExceptionInfo[ConfigError]) -> dict[str, Any]:
    """The single diagnostic of a ConfigError, as a dict."""
    assert len(excinfo.value.diagnostics) == 1, excinfo.value
    return excinfo.value.diagnostics[0].to_dict()


# --- the petstore --------------------------------------------------------------------------------


def test_every_petstore_operation_is_a_tool_named_by_its_operation_id() -> None:
    ops = petstore_ops()
    assert list(ops) == ["listPets", "createPet", "getPet", "deletePet", "replacePetTags"]
    assert {name: (op.method, op.path) for name, op in ops.items()} == {
        "listPets": ("GET", "/pets"),
        "createPet": ("POST", "/pets"),
        "getPet": ("GET", "/pets/{petId}"),
        "deletePet": ("DELETE", "/pets/{petId}"),
        "replacePetTags": ("PUT", "/pets/{petId}/tags"),
    }


def test_query_parameters_become_properties_and_query_args() -> None:
    op = petstore_ops()["listPets"]
    assert op.tool.input_schema == {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                      "description": "How many pets to return at most"},
            "tag": {"type": "string", "description": "Only pets with this tag"},
        },
    }
    assert (op.query, op.body, op.path_params) == (("limit", "tag"), False, ())
    assert op.tool.title == "List pets"
    assert op.tool.description == "List pets\n\nPets in the order they were added."


def test_path_parameters_from_the_path_item_are_required() -> None:
    op = petstore_ops()["getPet"]
    assert op.tool.input_schema == {
        "type": "object",
        "properties": {"petId": {"type": "integer", "format": "int64", "description": "The pet's id"}},
        "required": ["petId"],
    }
    assert (op.path_params, op.query, op.body) == (("petId",), (), False)


def test_object_body_is_merged_at_top_level_with_openapi_30_nullable_made_json_schema() -> None:
    op = petstore_ops()["createPet"]
    assert op.tool.input_schema == {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1},
                       "tag": {"type": ["string", "null"]}},
        "required": ["name"],
    }
    assert op.body is True


def test_non_object_body_goes_under_body() -> None:
    op = petstore_ops()["replacePetTags"]
    assert op.tool.input_schema["properties"]["body"] == {"type": "array", "items": {"type": "string"}}
    assert op.tool.input_schema["required"] == ["petId", "body"]
    assert op.body is True


def test_annotations_follow_the_method_and_the_extension() -> None:
    ops = petstore_ops()
    assert ops["listPets"].tool.annotations == {"readOnlyHint": True}
    assert ops["getPet"].tool.annotations == {"readOnlyHint": True}
    assert ops["deletePet"].tool.annotations == {"destructiveHint": True}
    assert ops["createPet"].tool.annotations == {"idempotentHint": False, "openWorldHint": False}
    assert ops["replacePetTags"].tool.annotations == {"idempotentHint": True}


def test_extension_overrides_a_method_hint() -> None:
    doc = document({"/x": {"delete": {"operationId": "soft", "x-mcp-annotations": {"destructiveHint": False}}}})
    assert only(doc).tool.annotations == {"destructiveHint": False}


def test_every_input_schema_is_a_valid_json_schema() -> None:
    for op in petstore_ops().values():
        jsonschema.Draft202012Validator.check_schema(op.tool.input_schema)


def test_json_document_gives_the_same_tools(tmp_path: Path) -> None:
    path = tmp_path / "petstore.json"
    path.write_text(json.dumps(yaml.safe_load(PETSTORE.read_text())), encoding="utf-8")
    from_json = by_name(operations_from_openapi(load_openapi(path), ["*"], []))
    assert from_json == petstore_ops()


# --- include / exclude ---------------------------------------------------------------------------


@pytest.mark.parametrize("include, exclude, expected", [
    (["*"], [], ["listPets", "createPet", "getPet", "deletePet", "replacePetTags"]),
    (["*Pet"], [], ["createPet", "getPet", "deletePet"]),
    (["list*", "get*"], [], ["listPets", "getPet"]),
    (["*"], ["delete*", "replace*"], ["listPets", "createPet", "getPet"]),
    (["getPet"], ["getPet"], []),
    (["nothing?"], [], []),
])
def test_include_and_exclude_are_globs_over_operation_ids(include: list[str], exclude: list[str],
                                                         expected: list[str]) -> None:
    assert list(petstore_ops(include, exclude)) == expected


def test_globs_see_the_raw_operation_id_and_the_tool_name() -> None:
    doc = document({"/a": {"get": {"operationId": "pets.list"}}})
    assert [op.tool.name for op in operations_from_openapi(doc, ["pets.*"], [])] == ["pets_list"]
    assert operations_from_openapi(doc, ["*"], ["pets_list"]) == []


def test_an_excluded_operation_may_be_broken() -> None:
    doc = document({"/up": {"post": {"operationId": "upload",
                                     "requestBody": {"content": {"multipart/form-data": {}}}}},
                    "/ok": {"get": {"operationId": "ok"}}})
    with pytest.raises(ConfigError):
        operations_from_openapi(doc, ["*"], [])
    assert [op.tool.name for op in operations_from_openapi(doc, ["*"], ["upload"])] == ["ok"]


def test_upstream_with_no_operations_left_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("pets", upstream_spec(PETSTORE, include=["nope*"]), EXAMPLE, {})
    d = config_error(excinfo)
    assert d["code"] == "openapi-no-operations" and "'pets'" in d["message"]


# --- names ---------------------------------------------------------------------------------------


def test_names_are_sanitized_and_derived_when_operation_id_is_missing() -> None:
    doc = document({
        "/pets/{petId}": {"get": {}, "delete": {"operationId": "pets: remove one!"}},
        "/v1/long": {"get": {"operationId": "x" * 80}},
        "/unicode": {"get": {"operationId": "ペット"}},
    })
    names = [op.tool.name for op in operations_from_openapi(doc, ["*"], [])]
    assert names == ["get_pets_petId", "pets_remove_one", "x" * 64, "get_unicode"]


def test_two_operations_with_one_name_are_a_config_error() -> None:
    doc = document({"/a": {"get": {"operationId": "same"}}, "/b": {"get": {"operationId": "same"}}})
    with pytest.raises(ConfigError) as excinfo:
        operations_from_openapi(doc, ["*"], [])
    d = config_error(excinfo)
    assert d["code"] == "openapi-duplicate-tool"
    assert "GET /b and GET /a both become tool 'same'" in d["message"]


def test_path_parameter_names_become_placeholder_safe() -> None:
    op = only(document({"/pets/{pet-id}/{1st}": {"get": {"operationId": "g", "parameters": [
        {"name": "pet-id", "in": "path", "required": True, "schema": {"type": "string"}}]}}}))
    assert op.path == "/pets/{pet_id}/{p_1st}"
    assert op.path_params == ("pet_id", "p_1st")
    assert op.tool.input_schema["properties"] == {"pet_id": {"type": "string"}, "p_1st": {"type": "string"}}
    assert op.tool.input_schema["required"] == ["pet_id", "p_1st"]


# --- parameters and bodies -----------------------------------------------------------------------


def test_header_and_cookie_parameters_are_not_exposed() -> None:
    op = only(document({"/x": {"get": {"operationId": "g", "parameters": [
        {"name": "X-Trace", "in": "header", "required": True, "schema": {"type": "string"}},
        {"name": "session", "in": "cookie", "schema": {"type": "string"}},
        {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}}]}}}))
    assert op.tool.input_schema == {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_operation_parameters_override_path_item_parameters() -> None:
    op = only(document({"/x": {
        "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}}],
        "get": {"operationId": "g", "parameters": [{"name": "q", "in": "query", "schema": {"type": "integer"}}]},
    }}))
    assert op.tool.input_schema["properties"] == {"q": {"type": "integer"}}


def test_body_all_of_is_merged_and_read_only_fields_are_dropped() -> None:
    doc = document({"/pets/{petId}": {"put": {
        "operationId": "putPet",
        "parameters": [{"$ref": "#/components/parameters/PetId"}],
        "requestBody": {"$ref": "#/components/requestBodies/Pet"}}}},
        components={
            "parameters": {"PetId": {"name": "petId", "in": "path", "required": True, "schema": {"type": "integer"}}},
            "requestBodies": {"Pet": {"content": {"application/json; charset=utf-8": {
                "schema": {"$ref": "#/components/schemas/Pet"}}}}},
            "schemas": {
                "Pet": {"allOf": [{"$ref": "#/components/schemas/New"},
                                  {"type": "object", "required": ["id"], "additionalProperties": False,
                                   "properties": {"id": {"type": "integer", "readOnly": True}}}]},
                "New": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            }})
    op = only(doc)
    assert op.tool.input_schema == {
        "type": "object",
        "properties": {"petId": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["petId", "name"],
        "additionalProperties": False,
    }


def test_one_of_body_goes_under_body() -> None:
    body = {"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"type": "string"}]}
    op = only(document({"/x": {"post": {"operationId": "p", "requestBody": {
        "content": {"application/json": {"schema": body}}}}}}))
    assert op.tool.input_schema == {"type": "object", "properties": {"body": body}}


@pytest.mark.parametrize("media_type", ["application/vnd.api+json", "application/json; charset=utf-8", "*/*"])
def test_json_like_media_types_count_as_json(media_type: str) -> None:
    op = only(document({"/x": {"post": {"operationId": "p", "requestBody": {"content": {media_type: {
        "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}}}}}))
    assert op.tool.input_schema == {"type": "object", "properties": {"a": {"type": "string"}}}


def test_json_body_without_a_schema_is_any_value_under_body() -> None:
    op = only(document({"/x": {"post": {"operationId": "p", "requestBody": {"content": {"application/json": None}}}}}))
    assert op.tool.input_schema == {"type": "object", "properties": {"body": {}}}


def test_the_body_argument_is_sent_as_the_body_itself() -> None:
    upstream = openapi_upstream("pets", upstream_spec(PETSTORE), EXAMPLE, {})
    assert upstream.request_for("replacePetTags", {"petId": 1, "body": ["a"]})[3] == ["a"]
    assert upstream.request_for("replacePetTags", {"petId": 1})[3] is None
    assert upstream.request_for("createPet", {"name": "body", "body": 1})[3] == {"name": "body", "body": 1}


def test_get_ignores_a_request_body_and_a_post_without_one_sends_none() -> None:
    doc = document({"/x": {
        "get": {"operationId": "g", "requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "properties": {"a": {"type": "string"}}}}}}},
        "post": {"operationId": "p"},
    }})
    ops = by_name(operations_from_openapi(doc, ["*"], []))
    assert ops["g"].body is False and ops["g"].tool.input_schema == {"type": "object", "properties": {}}
    assert ops["p"].body is False


def test_openapi_31_keywords_and_ref_siblings() -> None:
    doc = document({"/x": {"post": {"operationId": "p", "requestBody": {"content": {"application/json": {
        "schema": {"type": "object", "properties": {
            "when": {"$ref": "#/components/schemas/When", "description": "overrides"},
            "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
            "m": {"type": "integer", "maximum": 9, "exclusiveMaximum": False},
            "e": {"enum": [{"$ref": "not a reference"}]}}}}}}}}},
        components={"schemas": {"When": {"type": ["string", "null"], "format": "date-time", "description": "x"}}})
    doc["openapi"] = "3.1.0"
    props = only(doc).tool.input_schema["properties"]
    assert props["when"] == {"type": ["string", "null"], "format": "date-time", "description": "overrides"}
    assert props["n"] == {"type": "integer", "exclusiveMinimum": 0}
    assert props["m"] == {"type": "integer", "maximum": 9}
    assert props["e"] == {"enum": [{"$ref": "not a reference"}]}


# --- $ref cycles and fan-out ---------------------------------------------------------------------


def body_doc(schema_name: str, schemas: dict[str, Any]) -> dict[str, Any]:
    return document({"/x": {"post": {"operationId": "p", "requestBody": {"content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{schema_name}"}}}}}}}, components={"schemas": schemas})


def test_recursive_schema_is_cut_at_a_depth_limit_with_an_any_schema() -> None:
    node = {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}
    schema = only(body_doc("Node", {"Node": node})).tool.input_schema
    depth, level = 0, schema
    while level != {}:
        assert level["properties"]["name"] == {"type": "string"}
        level = level["properties"]["children"]["items"]
        depth += 1
        assert depth < 100
    assert depth >= 3  # unrolled a few levels before the cut
    jsonschema.Draft202012Validator.check_schema(schema)


def test_references_that_fan_out_stay_bounded() -> None:
    tree = {"type": "object", "properties": {
        side: {"$ref": "#/components/schemas/Tree"} for side in ("a", "b", "c", "d")}}
    started = time.thread_time()  # CPU time of this thread: other processes cannot inflate it
    schema = only(body_doc("Tree", {"Tree": tree})).tool.input_schema
    assert time.thread_time() - started < 5
    assert len(json.dumps(schema)) < 5_000_000


# --- servers -------------------------------------------------------------------------------------


def test_base_url_falls_back_to_the_first_server_with_variable_defaults() -> None:
    upstream = openapi_upstream("pets", upstream_spec(PETSTORE), EXAMPLE, {})
    assert upstream.request_for("getPet", {"petId": 7})[1] == "http://127.0.0.1:8181/pets/7"


def test_configured_base_url_wins() -> None:
    upstream = openapi_upstream("pets", upstream_spec(PETSTORE, base_url="https://pets.example/v2/"), EXAMPLE, {})
    assert upstream.request_for("getPet", {"petId": 7})[1] == "https://pets.example/v2/pets/7"


def test_spec_path_is_read_relative_to_the_config_directory() -> None:
    upstream = openapi_upstream("pets", upstream_spec(Path("petstore.yaml")), EXAMPLE, {})
    assert next(t.name for t in upstream.tools()) == "listPets"


@pytest.mark.parametrize("servers, shown", [
    ("servers: [{url: /v1}]", "servers[0].url is '/v1'"),
    ("servers: [{url: 'ftp://files.example'}]", "servers[0].url is 'ftp://files.example'"),
    ("servers: [{url: 'https://{tenant}.example'}]", "servers[0].url is 'https://{tenant}.example'"),
    ("servers: []", "the document has no servers[].url"),
])
def test_server_url_that_is_not_absolute_http_is_a_config_error(write: Write, servers: str, shown: str) -> None:
    path = write("api.yaml", f"""
        openapi: 3.0.0
        info: {{title: t, version: "1"}}
        {servers}
        paths:
          /x: {{get: {{operationId: x}}}}
        """)
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("api", upstream_spec(path), path.parent, {})
    d = config_error(excinfo)
    assert d["code"] == "openapi-server" and shown in d["message"]
    assert "base_url" in d["hint"]
    assert (d["file"], d["line"]) == (str(path), 3)


# --- broken documents ----------------------------------------------------------------------------


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(tmp_path / "absent.yaml")
    d = config_error(excinfo)
    assert d["code"] == "unreadable" and d["file"] == str(tmp_path / "absent.yaml")


def test_yaml_syntax_error_names_line_and_column(write: Write) -> None:
    path = write("api.yaml", "openapi: 3.0.0\npaths:\n  /x: [unclosed\n")
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(path)
    d = config_error(excinfo)
    assert d["code"] == "yaml-syntax" and d["file"] == str(path) and d["line"] == 4


def test_json_syntax_error_names_line_and_column(write: Write) -> None:
    path = write("api.json", '{\n  "openapi": "3.0.0",\n  "paths": {,}\n}\n')
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(path)
    d = config_error(excinfo)
    assert (d["code"], d["line"], d["column"]) == ("json-syntax", 3, 13)


def test_binary_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "api.yaml"
    path.write_bytes(b"\xff\xfe\x00openapi")
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(path)
    assert config_error(excinfo)["code"] == "encoding"


@pytest.mark.parametrize("text, code", [
    ("swagger: '1.2'\npaths: {}\n", "openapi-version"),
    ("swaggerVersion: '1.2'\napis: []\n", "openapi-version"),
    ("openapi: 3\npaths: {}\n", "openapi-version"),
    ("- just\n- a list\n", "openapi-document"),
    ("", "openapi-document"),
])
def test_document_that_is_not_openapi_3_is_a_config_error(write: Write, text: str, code: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(write("api.yaml", text))
    assert config_error(excinfo)["code"] == code


def test_recursive_yaml_alias_is_a_config_error(write: Write) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(write("api.yaml", "openapi: 3.0.0\npaths: &x\n  /a: *x\n"))
    assert config_error(excinfo)["code"] == "yaml-too-large"  # the alias refers to a value containing it


def test_duplicate_yaml_key_is_a_config_error(write: Write) -> None:
    path = write("api.yaml", "openapi: 3.0.0\npaths: {}\npaths: {}\n")
    with pytest.raises(ConfigError) as excinfo:
        load_openapi(path)
    assert (config_error(excinfo)["code"], config_error(excinfo)["line"]) == ("duplicate-key", 3)


BROKEN = """
    openapi: 3.0.3
    info: {title: t, version: "1"}
    servers: [{url: "http://127.0.0.1:1"}]
    paths:
      /dangling:
        get:
          operationId: dangling
          parameters: [{$ref: "#/components/parameters/Missing"}]
      /external:
        get:
          operationId: external
          responses: {}
          parameters: [{$ref: "shared.yaml#/components/parameters/Page"}]
      /clash/{name}:
        post:
          operationId: clash
          parameters: [{name: name, in: path, required: true, schema: {type: string}}]
          requestBody:
            content:
              application/json:
                schema: {type: object, properties: {name: {type: string}}}
      /upload:
        post:
          operationId: upload
          requestBody:
            content: {application/octet-stream: {}}
      /hints:
        get:
          operationId: hints
          x-mcp-annotations: [readOnlyHint]
      /fine:
        get:
          operationId: fine
    """


def test_every_broken_operation_is_reported_at_once_with_its_line(write: Write) -> None:
    path = write("api.yaml", BROKEN)
    lines = path.read_text().splitlines()

    def line_of(text: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if text in line)

    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("api", upstream_spec(path), path.parent, {})
    got = {d.code + ":" + d.message.split(":")[0]: d for d in excinfo.value.diagnostics}
    assert len(excinfo.value.diagnostics) == 5, excinfo.value
    dangling = got["openapi-ref:$ref '#/components/parameters/Missing' points at nothing"]
    assert (dangling.file, dangling.line) == (str(path), line_of("operationId: dangling"))
    shared = path.parent / "shared.yaml"  # named by a $ref, but not there
    external = got[f"openapi-ref:$ref '{shared}#/components/parameters/Page'"]
    assert "cannot read" in external.message and "No such file" in external.message
    assert external.line == line_of("operationId: external") and "exclude" in (external.hint or "")
    clash = got["openapi-name-clash:operation clash (POST /clash/{name})"]
    assert "body field(s) name clash with a path or query parameter" in clash.message
    upload = got["openapi-body:operation upload (POST /upload)"]
    assert "application/octet-stream" in upload.message and "exclude: [upload]" in (upload.hint or "")
    assert upload.line == line_of("content: {application/octet-stream")
    hints = got["openapi-annotations:operation hints (GET /hints)"]
    assert hints.line == line_of("x-mcp-annotations:")
    assert str(path) + f":{dangling.line}:" in str(excinfo.value)


def test_excluding_the_broken_operations_leaves_a_working_upstream(write: Write) -> None:
    path = write("api.yaml", BROKEN)
    spec = upstream_spec(path, exclude=["dangling", "external", "clash", "upload", "hints"])
    assert [t.name for t in openapi_upstream("api", spec, path.parent, {}).tools()] == ["fine"]


# --- the example config --------------------------------------------------------------------------


def test_example_config_loads_and_builds_its_openapi_upstream() -> None:
    config = load_config(EXAMPLE / "gateway.yaml")
    (up,) = config.spec.upstreams
    assert up.openapi is not None
    upstream = openapi_upstream(up.name, up.openapi, config.base, {})
    assert sorted(up.exposed_name(t.name) for t in upstream.tools()) == [
        "petstore_createPet", "petstore_deletePet", "petstore_getPet", "petstore_listPets",
        "petstore_replacePetTags"]


# --- end to end against the example petstore -----------------------------------------------------


async def test_calls_through_openapi_upstream_reach_the_real_petstore(serve: Serve) -> None:
    base_url = await serve(petstore_app_module().create_app())
    upstream = openapi_upstream("petstore", upstream_spec(PETSTORE, base_url=base_url), EXAMPLE,
                                {"X-Client": "gateway-tests"})
    await upstream.start()
    try:
        listed = await upstream.call("listPets", {"limit": 1}, TIMEOUT)
        assert not listed.is_error
        assert listed.structured == {"result": [{"id": 1, "name": "Rex", "tag": "dog", "tags": []}]}

        cats = await upstream.call("listPets", {"tag": "cat"}, TIMEOUT)
        assert [p["name"] for p in cats.structured["result"]] == ["Tom"]

        created = await upstream.call("createPet", {"name": "Fido", "tag": None}, TIMEOUT)
        assert created.structured == {"id": 3, "name": "Fido", "tag": None, "tags": []}

        tagged = await upstream.call("replacePetTags", {"petId": 3, "body": ["good", "boy"]}, TIMEOUT)
        assert tagged.structured["tags"] == ["good", "boy"]

        fetched = await upstream.call("getPet", {"petId": 3}, TIMEOUT)
        assert json.loads(fetched.text) == {"id": 3, "name": "Fido", "tag": None, "tags": ["good", "boy"]}

        deleted = await upstream.call("deletePet", {"petId": 3}, TIMEOUT)
        assert not deleted.is_error

        gone = await upstream.call("getPet", {"petId": 3}, TIMEOUT)
        assert gone.is_error and gone.text == 'HTTP 404: {"message": "no such pet"}'

        invalid = await upstream.call("createPet", {"tag": "nameless"}, TIMEOUT)
        assert invalid.is_error and invalid.structured == {"message": "name is required"}
    finally:
        await upstream.close()


async def test_a_hostile_path_argument_cannot_reach_another_route(serve: Serve) -> None:
    base_url = await serve(petstore_app_module().create_app())
    upstream = openapi_upstream("petstore", upstream_spec(PETSTORE, base_url=base_url), EXAMPLE, {})
    await upstream.start()
    try:
        # Unencoded, "?limit=1" would list the pets and "#x" would fetch pet 1.
        for value in ("?limit=1", "1#x", "1 OR 1=1"):
            result = await upstream.call("getPet", {"petId": value}, TIMEOUT)
            assert result.is_error and result.text.startswith("HTTP 404: "), (value, result.text)
        for value in ("../pets", "http://127.0.0.1:1/"):  # could leave the segment: refused before sending
            with pytest.raises(InvalidArgumentsError):
                await upstream.call("getPet", {"petId": value}, TIMEOUT)
    finally:
        await upstream.close()


async def test_a_slash_in_a_path_argument_cannot_reach_another_route(serve: Serve) -> None:
    base_url = await serve(petstore_app_module().create_app())
    upstream = openapi_upstream("petstore", upstream_spec(PETSTORE, base_url=base_url), EXAMPLE, {})
    await upstream.start()
    try:
        # sent as %2F, Starlette (like many servers) would decode it and route GET /pets/1/tags
        with pytest.raises(InvalidArgumentsError, match="single, non-empty path segment"):
            await upstream.call("getPet", {"petId": "1/tags"}, TIMEOUT)
    finally:
        await upstream.close()
