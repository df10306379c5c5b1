"""OpenAPI specs as people have them: Swagger 2.0, a spec URL, external $refs, and errors that say where.

The service (openapi_service.py) is real: Starlette under uvicorn on 127.0.0.1, serving its own
Swagger 2.0 document at /spec.json and the API it describes, recording each API request.
"""

from __future__ import annotations

import asyncio
import json
import socket
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import pytest
import yaml
from cli_run import run_cli
from loopback import serve_app
from openapi_service import HTTPBIN_SWAGGER, create_app
from starlette.types import ASGIApp

from gateway.app import build_app, server_options
from gateway.config.load import check_config, load_config
from gateway.config.model import OpenApiUpstreamSpec
from gateway.core.errors import ConfigError
from gateway.core.limits import MAX_OPENAPI_DOCUMENT_BYTES
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.openapi import openapi_upstream

Serve = Callable[[ASGIApp], Awaitable[str]]
TIMEOUT = 5.0


def spec_of(spec: str | Path, **fields: Any) -> OpenApiUpstreamSpec:
    return OpenApiUpstreamSpec.model_validate({"spec": str(spec), **fields})


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def schema_of(upstream: HttpUpstream, tool: str) -> dict[str, Any]:
    return next(t.input_schema for t in upstream.tools() if t.name == tool)


def only_error(excinfo: pytest.ExceptionInfo[ConfigError]) -> dict[str, Any]:
    assert len(excinfo.value.diagnostics) == 1, excinfo.value
    return excinfo.value.diagnostics[0].to_dict()


async def start_refused(upstream: Any) -> dict[str, Any]:
    """The one diagnostic starting ``upstream`` is refused with (it is closed either way)."""
    try:
        with pytest.raises(ConfigError) as excinfo:
            await upstream.start()
    finally:
        await upstream.close()
    return only_error(excinfo)


# --- Swagger 2.0 ---------------------------------------------------------------------------------


def httpbin_file(tmp_path: Path, **top: Any) -> Path:
    return write(tmp_path, "spec.json", json.dumps({**HTTPBIN_SWAGGER, **top}))


HTTPBIN_TOOLS = ["get_get", "get_anything_anything", "post_anything_anything", "get_status_codes",
                 "get_bytes_n", "get_response-headers", "get_redirect-to", "post_redirect-to"]


def test_a_swagger_2_document_like_httpbins_becomes_tools(tmp_path: Path) -> None:
    path = httpbin_file(tmp_path, host="httpbin.example")
    upstream = openapi_upstream("bin", spec_of(path), tmp_path, {})
    assert [t.name for t in upstream.tools()] == HTTPBIN_TOOLS
    # host + basePath + the first of its schemes
    assert upstream.base_url == "https://httpbin.example"
    body = schema_of(upstream, "post_anything_anything")
    assert body == {"type": "object", "properties": {
        "anything": {"type": "string"},  # a path parameter with no type is a string
        "dry_run": {"type": "boolean"},
        "name": {"type": "string"},
        "tag": {"type": ["string", "null"]},  # x-nullable
        "owner": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
    }, "required": ["anything", "name"]}  # the readOnly id is not sent
    assert schema_of(upstream, "get_get")["properties"] == {
        "show_env": {"type": "boolean", "description": "Show the environment"}}  # a #/parameters/ ref
    assert schema_of(upstream, "get_bytes_n")["properties"]["n"] == {"type": "integer"}  # httpbin's "int"
    assert schema_of(upstream, "get_response-headers")["properties"]["freeform"]["type"] == "object"
    assert schema_of(upstream, "get_redirect-to")["required"] == ["url"]
    for tool in upstream.tools():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
    get = next(t for t in upstream.tools() if t.name == "get_get")
    assert get.title == "The request's query parameters." and get.annotations == {"readOnlyHint": True}


def test_swagger_2_schemes_pick_the_scheme_and_base_path_is_kept(tmp_path: Path) -> None:
    path = httpbin_file(tmp_path, host="api.example:8443", basePath="/v2", schemes=["http"])
    upstream = openapi_upstream("bin", spec_of(path), tmp_path, {})
    assert upstream.request_for("get_status_codes", {"codes": 418})[1] == "http://api.example:8443/v2/status/418"


def test_swagger_2_form_data_becomes_the_fields_of_a_form(tmp_path: Path) -> None:
    upstream = openapi_upstream("bin", spec_of(httpbin_file(tmp_path, host="httpbin.example")), tmp_path, {})
    assert schema_of(upstream, "post_redirect-to") == {"type": "object", "properties": {
        "url": {"type": "string"}, "status_code": {"type": "integer"}}, "required": ["url"]}


def test_a_multipart_upload_is_named_with_a_way_out(tmp_path: Path) -> None:
    upload = {"post": {"operationId": "upload", "consumes": ["multipart/form-data"], "parameters": [
        {"in": "formData", "name": "file", "type": "file", "required": True}], "responses": {}}}
    path = httpbin_file(tmp_path, host="httpbin.example", paths={**HTTPBIN_SWAGGER["paths"], "/upload": upload})
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("bin", spec_of(path), tmp_path, {})
    d = only_error(excinfo)
    assert d["code"] == "openapi-body" and "multipart/form-data" in d["message"]
    assert "exclude: [upload]" in d["hint"]


def test_a_swagger_2_file_without_a_host_needs_base_url(tmp_path: Path) -> None:
    path = httpbin_file(tmp_path)  # httpbin's spec has no host: it is relative to where it is served
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("bin", spec_of(path), tmp_path, {})
    d = only_error(excinfo)
    assert d["code"] == "openapi-server" and "base_url" in d["hint"]
    given = openapi_upstream("bin", spec_of(path, base_url="http://127.0.0.1:9"), tmp_path, {})
    assert given.base_url == "http://127.0.0.1:9"


@pytest.mark.parametrize("head, shown, line", [
    ("swagger: '1.2'", "swagger: '1.2'", 2),
    ("swaggerVersion: '1.2'", "swaggerVersion: '1.2'", 2),
    ("openapi: 2.5.0", "openapi: '2.5.0'", 2),
    ("title: not an API", "no openapi or swagger field", 2),  # the document's first line
])
def test_an_unsupported_version_is_named_with_its_line(tmp_path: Path, head: str, shown: str, line: int) -> None:
    path = write(tmp_path, "api.yaml", f"# an old document\n{head}\npaths: {{}}\n")
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("api", spec_of(path), tmp_path, {})
    d = only_error(excinfo)
    assert d["code"] == "openapi-version" and shown in d["message"] and "Swagger 2.0" in d["message"]
    assert (d["file"], d["line"]) == (str(path), line)
    assert str(path) + f":{line}:" in str(excinfo.value)


# --- external $refs next to the file -------------------------------------------------------------


def three_files(root: Path) -> Path:
    """api.yaml -> other.yaml (a component) and schemas/pet.json (a whole file) -> back to api.yaml."""
    write(root, "other.yaml", """
        components:
          schemas:
            Owner:
              type: object
              properties:
                email: {$ref: "#/components/schemas/Email"}
                pets: {type: array, items: {$ref: "schemas/pet.json"}}
            Email: {type: string, format: email}
        """)
    write(root, "schemas/pet.json", json.dumps({
        "type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"},
            "kind": {"$ref": "../api.yaml#/components/schemas/Kind"},
            "owner": {"$ref": "../other.yaml#/components/schemas/Owner"}}}))
    return write(root, "api.yaml", """
        openapi: 3.0.3
        info: {title: t, version: "1"}
        servers: [{url: "http://127.0.0.1:9"}]
        paths:
          /pets:
            post:
              operationId: createPet
              parameters: [{$ref: "other.yaml#/components/parameters/Missing"}]
              requestBody:
                content:
                  application/json:
                    schema: {$ref: "./schemas/pet.json"}
          /owners:
            get:
              operationId: getOwner
              parameters:
                - {name: owner, in: query, schema: {$ref: "other.yaml#/components/schemas/Owner"}}
        components:
          schemas:
            Kind: {type: string, enum: [cat, dog]}
        """)


def test_external_refs_next_to_the_file_are_inlined_and_cycles_end(tmp_path: Path) -> None:
    api = three_files(tmp_path)
    upstream = openapi_upstream("api", spec_of(api, exclude=["createPet"]), tmp_path, {})
    owner = schema_of(upstream, "getOwner")["properties"]["owner"]
    assert owner["properties"]["email"] == {"type": "string", "format": "email"}  # a ref local to other.yaml
    pet = owner["properties"]["pets"]["items"]
    assert pet["required"] == ["name"]
    assert pet["properties"]["kind"] == {"type": "string", "enum": ["cat", "dog"]}  # back in api.yaml
    # Owner -> pets -> Pet -> owner -> Owner ...: unrolled to the depth limit, then any value.
    text = json.dumps(owner)
    assert text.count('"email"') >= 3 and "{}" in text


def test_a_bad_ref_in_another_file_names_the_pointer_the_file_and_the_operation(tmp_path: Path) -> None:
    api = three_files(tmp_path)
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("api", spec_of(api), tmp_path, {})
    d = only_error(excinfo)
    assert d["code"] == "openapi-ref"
    assert f"$ref '{tmp_path / 'other.yaml'}#/components/parameters/Missing' points at nothing" in d["message"]
    lines = api.read_text().splitlines()
    assert (d["file"], d["line"]) == (str(api), lines.index("      operationId: createPet") + 1)


@pytest.mark.parametrize("ref, why", [
    ("../outside/secret.yaml#/components/schemas/Secret", "is outside the spec's directory"),
    ("/etc/passwd", "is outside the spec's directory"),
    ("http://127.0.0.1:9/schemas.yaml#/Secret", "may name only files next to it, not URLs"),
    ("file:///etc/passwd", "may name only files next to it, not URLs"),
])
def test_a_ref_cannot_lead_out_of_the_specs_directory(tmp_path: Path, ref: str, why: str) -> None:
    # The file a hostile ref names exists and is a valid document: only the rule keeps it out.
    write(tmp_path, "outside/secret.yaml", "components: {schemas: {Secret: {type: string, description: s3cr3t}}}\n")
    api = write(tmp_path, "spec/api.yaml", f"""
        openapi: 3.0.3
        info: {{title: t, version: "1"}}
        servers: [{{url: "http://127.0.0.1:9"}}]
        paths:
          /leak:
            get:
              operationId: leak
              parameters: [{{name: q, in: query, schema: {{$ref: "{ref}"}}}}]
          /fine:
            get: {{operationId: fine}}
        """)
    with pytest.raises(ConfigError) as excinfo:
        openapi_upstream("api", spec_of(api), tmp_path, {})
    d = only_error(excinfo)
    assert d["code"] == "openapi-ref" and why in d["message"] and "s3cr3t" not in str(excinfo.value)
    assert d["line"] == 7  # the operation that holds the ref
    # The operation can be left out; the rest works.
    kept = openapi_upstream("api", spec_of(api, exclude=["leak"]), tmp_path, {})
    assert [t.name for t in kept.tools()] == ["fine"]


# --- a spec URL ----------------------------------------------------------------------------------


async def test_a_spec_url_is_fetched_at_start_and_calls_reach_the_service(serve: Serve, tmp_path: Path) -> None:
    app = create_app()
    base = await serve(app)
    upstream = openapi_upstream("bin", spec_of(f"{base}/spec.json"), tmp_path, {})
    assert upstream.tools() == []  # nothing is fetched before the upstream starts
    await upstream.start()
    try:
        assert [t.name for t in upstream.tools()] == HTTPBIN_TOOLS
        assert upstream.base_url == base  # basePath "/" resolved against the spec's URL
        created = await upstream.call("post_anything_anything", {
            "anything": "pets", "dry_run": True, "name": "Rex", "tag": None,
            "owner": {"email": "a@example.com"}}, TIMEOUT)
        assert not created.is_error, created.text
        got = await upstream.call("get_get", {"show_env": False}, TIMEOUT)
        assert not got.is_error
        teapot = await upstream.call("get_status_codes", {"codes": 418}, TIMEOUT)
        assert teapot.is_error and teapot.text.startswith("HTTP 418")
        form = await upstream.call("post_redirect-to", {"url": "https://example.com/?a=1&b", "status_code": 307},
                                   TIMEOUT)
        assert not form.is_error, form.text
    finally:
        await upstream.close()
    assert app.state.requests == [
        {"method": "POST", "path": "/anything/pets", "query": [("dry_run", "true")],
         "json": {"name": "Rex", "tag": None, "owner": {"email": "a@example.com"}}},
        {"method": "GET", "path": "/get", "query": [("show_env", "false")], "json": None},
        {"method": "GET", "path": "/status/418", "query": [], "json": None},
        {"method": "POST", "path": "/redirect-to", "query": [],
         "form": [("status_code", "307"), ("url", "https://example.com/?a=1&b")]},
    ]


OPENAPI_V3 = """
openapi: 3.1.0
info: {title: pets, version: "1"}
servers: [{url: /api}]
paths:
  /pets/{petId}:
    post:
      operationId: updatePet
      parameters: [{name: petId, in: path, required: true, schema: {type: integer}}]
      requestBody:
        content:
          application/json:
            schema: {$ref: "schemas/pet.yaml#/Pet"}
"""
PET_YAML = """
Pet:
  type: object
  properties:
    name: {type: string}
    kind: {$ref: "#/Kind"}
Kind: {type: string, enum: [cat, dog]}
"""


async def test_a_url_spec_follows_its_refs_on_its_own_origin(serve: Serve, tmp_path: Path) -> None:
    app = create_app({"/v3/openapi.yaml": (OPENAPI_V3, "application/yaml"),
                      "/v3/schemas/pet.yaml": (PET_YAML, "application/yaml")})
    base = await serve(app)
    upstream = openapi_upstream("pets", spec_of(f"{base}/v3/openapi.yaml"), tmp_path, {})
    await upstream.start()
    try:
        assert schema_of(upstream, "updatePet")["properties"] == {
            "petId": {"type": "integer"}, "name": {"type": "string"},
            "kind": {"type": "string", "enum": ["cat", "dog"]}}
        assert upstream.base_url == f"{base}/api"  # a relative server URL, against the spec's URL
        result = await upstream.call("updatePet", {"petId": 7, "name": "Tom", "kind": "cat"}, TIMEOUT)
        assert not result.is_error, result.text
    finally:
        await upstream.close()
    assert app.state.requests == [{"method": "POST", "path": "/api/pets/7", "query": [],
                                   "json": {"name": "Tom", "kind": "cat"}}]


async def test_a_url_spec_cannot_make_the_gateway_fetch_another_origin(serve: Serve, tmp_path: Path) -> None:
    elsewhere = create_app({"/schemas/pet.yaml": (PET_YAML, "application/yaml")})
    other = await serve(elsewhere)
    hostile = OPENAPI_V3.replace("schemas/pet.yaml#/Pet", f"{other}/schemas/pet.yaml#/Pet")
    served = create_app({"/v3/openapi.yaml": (hostile, "application/yaml")})
    base = await serve(served)
    upstream = openapi_upstream("pets", spec_of(f"{base}/v3/openapi.yaml"), tmp_path, {})
    d = await start_refused(upstream)
    assert d["code"] == "openapi-ref" and f"is not on the spec's origin {base}" in d["message"]
    assert d["file"] == f"{base}/v3/openapi.yaml"
    assert upstream.tools() == []
    assert served.state.fetched == ["/v3/openapi.yaml"] and elsewhere.state.fetched == []  # never asked


async def test_an_error_in_a_json_spec_at_a_url_names_its_json_pointer(serve: Serve, tmp_path: Path) -> None:
    doc = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {
        "/pets/{id}": {"get": {"operationId": "getPet", "parameters": [{"$ref": "#/components/parameters/Nope"}]}}}}
    base = await serve(create_app({"/openapi.json": (json.dumps(doc), "application/json")}))
    upstream = openapi_upstream("pets", spec_of(f"{base}/openapi.json"), tmp_path, {})
    d = await start_refused(upstream)
    assert d["file"] == f"{base}/openapi.json" and d["message"] == (
        "$ref '#/components/parameters/Nope' points at nothing (at #/paths/~1pets~1{id}/get)")


@pytest.mark.parametrize("path, why", [
    ("/nothing-here.json", "HTTP 404"),
    ("/moved.json", "HTTP 302 (redirect to /spec.json)"),  # redirects are not followed
    ("/huge.json", f"more than {MAX_OPENAPI_DOCUMENT_BYTES} bytes"),  # streamed without a length
])
async def test_a_spec_url_that_does_not_answer_200_is_named(serve: Serve, tmp_path: Path, path: str,
                                                            why: str) -> None:
    base = await serve(create_app())
    upstream = openapi_upstream("bin", spec_of(f"{base}{path}"), tmp_path, {})
    d = await start_refused(upstream)
    assert d["code"] == "openapi-unreachable" and d["message"] == f"cannot fetch OpenAPI spec {base}{path}: {why}"


async def test_an_unreachable_spec_url_is_named_with_a_hint(refused_url: str, tmp_path: Path) -> None:
    upstream = openapi_upstream("bin", spec_of(f"{refused_url}/spec.json"), tmp_path, {})
    d = await start_refused(upstream)
    assert d["code"] == "openapi-unreachable" and f"cannot fetch OpenAPI spec {refused_url}/spec.json" in d["message"]
    assert "ConnectError" in d["message"] and "is the service up" in d["hint"]


async def test_a_broken_document_at_a_url_names_the_url_line_and_column(serve: Serve, tmp_path: Path) -> None:
    base = await serve(create_app({"/broken.json": ('{\n  "openapi": "3.0.0",\n  "paths": {,}\n}\n',
                                                    "application/json")}))
    upstream = openapi_upstream("bin", spec_of(f"{base}/broken.json"), tmp_path, {})
    d = await start_refused(upstream)
    assert (d["code"], d["file"], d["line"], d["column"]) == ("json-syntax", f"{base}/broken.json", 3, 13)


# --- the gateway, configured with a spec URL -----------------------------------------------------


def gateway_yaml(root: Path, spec: str, exclude: tuple[str, ...] = ()) -> Path:
    config = {
        "policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"},
        "auth": {"anonymous": {"id": "tester"}},
        "upstreams": [{"name": "bin", "openapi": {"spec": spec, "exclude": list(exclude)}}],
    }
    write(root, "policies/allow.yaml", """
        policy: teapots
        rules:
          - id: no-teapots
            tools: [bin_get_status_codes]
            when: args.codes == "418"
            action: reject
            message: no teapots
        """)
    return write(root, "gateway.yaml", yaml.safe_dump(config))


async def test_the_gateway_exposes_and_calls_the_operations_of_a_spec_url(serve: Serve, tmp_path: Path) -> None:
    app = create_app()
    base = await serve(app)
    config = load_config(gateway_yaml(tmp_path, f"{base}/spec.json"))
    async with serve_app(build_app(config), options=server_options(config)) as url, \
            httpx2.AsyncClient(base_url=url, timeout=10) as client:
        listed = (await client.get("/v1/tools")).json()
        names = sorted(t["name"] for t in listed["tools"])
        assert names == sorted(f"bin_{n}" for n in HTTPBIN_TOOLS)
        called = await client.post("/v1/tools/bin_post_anything_anything/invoke", json={"arguments": {
            "anything": "x y", "dry_run": False, "name": "Rex", "owner": {"email": "o@example.com"}}})
        assert called.status_code == 200, called.text
        # a path parameter without a type is a string (the call's values are checked against the schema
        # before policies read them)
        refused = await client.post("/v1/tools/bin_get_status_codes/invoke", json={"arguments": {"codes": "418"}})
        assert (refused.json()["decision"], refused.json()["is_error"]) == ("reject", True)
    # The call reached the service as the document describes it; the rejected one never did.
    assert app.state.requests == [{"method": "POST", "path": "/anything/x y", "query": [("dry_run", "false")],
                                   "json": {"name": "Rex", "owner": {"email": "o@example.com"}}}]


async def test_gateway_check_fetches_a_spec_url(serve: Serve, tmp_path: Path) -> None:
    base = await serve(create_app())
    good = gateway_yaml(tmp_path / "good", f"{base}/spec.json")
    # In a worker thread: the service runs in this event loop, which must keep serving meanwhile.
    config, problems = await asyncio.to_thread(check_config, good, fetch_specs=True)
    assert problems == [] and config is not None
    broken = gateway_yaml(tmp_path / "broken", f"{base}/spec.json", exclude=("*",))
    _, problems = await asyncio.to_thread(check_config, broken, fetch_specs=True)
    assert [d.code for d in problems] == ["openapi-no-operations"]  # found only by fetching the spec


def test_gateway_check_says_when_a_spec_url_is_unreachable(tmp_path: Path, refused_url: str) -> None:
    path = gateway_yaml(tmp_path, f"{refused_url}/spec.json")
    run = run_cli(tmp_path, "check", "--config", str(path))
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "spec:" in text)
    assert f"{path}:{line}:" in out and "error[openapi-unreachable]" in out
    assert f"upstream 'bin': cannot fetch OpenAPI spec {refused_url}/spec.json" in out
    # Loading the config to serve does not fetch: the upstream fetches its spec when it starts.
    assert check_config(path)[1] == []


async def test_a_launched_service_gives_its_own_spec_url(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a free port for the service (released for it to bind)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config_file = gateway_yaml(tmp_path, f"http://127.0.0.1:{port}/spec.json")
    config = yaml.safe_load(config_file.read_text())
    config["upstreams"][0]["openapi"]["launch"] = {
        "command": "python", "args": [str(Path(__file__).with_name("openapi_service.py")), str(port)]}
    config_file.write_text(yaml.safe_dump(config))
    loaded = load_config(config_file)
    async with serve_app(build_app(loaded), options=server_options(loaded)) as url, \
            httpx2.AsyncClient(base_url=url, timeout=10) as client:
        # Launched, then asked for its spec, whose relative server is the launched service itself.
        called = await client.post("/v1/tools/bin_get_anything_anything/invoke",
                                   json={"arguments": {"anything": "launched"}})
        assert called.status_code == 200, called.text
        assert called.json()["structured"] == {
            "method": "GET", "path": "/anything/launched", "query": [], "json": None}
