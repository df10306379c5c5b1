"""GET /openapi.json: a valid OpenAPI 3.1 document that describes exactly the gateway's REST routes."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import schemathesis
import yaml
from loopback import serve_app
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route

from gateway.app import build_app
from gateway.auth.keys import hash_key
from gateway.config.load import load_config
from gateway.frontends.openapi_doc import OPENAPI_PATH, UNDESCRIBED_PATHS, openapi_document

KEY = "openapi-doc-key-3e9a"
KEY_HASH = hash_key(KEY)
TOOL = "secretive_lookup"  # a tool name that must not leak into the public document
OPEN_PATHS = {"/healthz", "/readyz"}  # the only operations served without a key


# An issuer nobody answers for: building the app reads no discovery document (keys are fetched once it serves).
ISSUER = "https://idp.example.test"


def make_app(root: Path, *, every_part: bool = False) -> Starlette:
    """The real app from a real gateway.yaml (one key, one HTTP tool on a port nobody needs); ``every_part``
    adds what serves routes of its own only when configured: ``auth.jwt`` with ``auth.resource_metadata``
    (RFC 9728 metadata) and ``approvals.sso`` (the approvers' sign-in)."""
    (root / "policies").mkdir()
    (root / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    config: dict[str, Any] = {
        "policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"}, "audit": {"file": "data/audit.jsonl"},
        "auth": {"api_keys": [{"principal": {"id": "alice"}, "sha256": KEY_HASH}]},
        "upstreams": [{"name": "secretive", "http": {"base_url": "http://127.0.0.1:9", "tools": [
            {"name": "lookup", "method": "GET", "path": "/lookup"}]}}],
    }
    if every_part:
        config["auth"]["jwt"] = [{"issuer": ISSUER, "audiences": ["https://gateway.example.test/mcp"]}]
        config["auth"]["resource_metadata"] = {"resource": "https://gateway.example.test/mcp",
                                               "authorization_servers": [ISSUER]}
        config["approvals"] = {"public_url": "https://gateway.example.test",
                               "sso": {"issuer": ISSUER, "client_id": "approvals-page"}}
    (root / "gateway.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return build_app(load_config(root / "gateway.yaml"))


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Starlette]:
    built = make_app(tmp_path)
    yield built
    built.state.gateway.store.close()


@pytest.fixture
def full_app(tmp_path: Path) -> Iterator[Starlette]:
    """The app with every part that has routes of its own configured (so every route there can be is checked)."""
    built = make_app(tmp_path, every_part=True)
    yield built
    built.state.gateway.store.close()


def served_operations(routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    """(path, method) of every route of the app, through mounts (HEAD is implied by GET)."""
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            found |= served_operations(list(route.routes), prefix + route.path)
        elif isinstance(route, Route):
            found |= {(prefix + route.path, m.lower()) for m in route.methods or {"GET"} if m != "HEAD"}
    return found


def test_the_document_is_valid_openapi_31() -> None:
    """schemathesis validates the document against the OpenAPI 3.1 meta-schema (and would refuse a broken one)."""
    document = openapi_document()
    assert document["openapi"].startswith("3.1")
    schemathesis.openapi.from_dict(document).validate()

    broken = copy.deepcopy(document)
    broken["paths"]["/v1/tools"]["get"]["responses"]["200"] = {"content": "not a media type map"}
    with pytest.raises(ValueError, match="\"description\" is a required property"):
        schemathesis.openapi.from_dict(broken).validate()


def test_every_reference_resolves() -> None:
    """Each $ref points at a component that exists."""
    document = openapi_document()
    refs = {part.split('"')[0] for part in json.dumps(document).split('"$ref": "')[1:]}
    assert refs
    for ref in refs:
        node: Any = document
        for key in ref.removeprefix("#/").split("/"):
            node = node[key]


def test_the_document_describes_exactly_the_rest_routes(full_app: Starlette) -> None:
    """A route added to the app without a description here (or described but gone) fails this test; the app has
    single sign-on and the protected resource metadata configured, so their routes are checked too."""
    served = served_operations(list(full_app.routes))
    assert {"/approvals/sso/login", "/.well-known/oauth-protected-resource"} <= {path for path, _ in served}
    described = {(path, method) for path, item in openapi_document()["paths"].items() for method in item}
    undescribed = {(path, method) for path, method in served if path in UNDESCRIBED_PATHS}
    assert described == served - undescribed
    # The exceptions are still real routes, so the list of them cannot go stale either.
    assert {path for path, _ in undescribed} == set(UNDESCRIBED_PATHS)


def test_operations_declare_auth_and_the_error_shape() -> None:
    """Every operation but /healthz and /readyz needs a key; every 4xx answers the one error body."""
    document = openapi_document()
    assert set(document["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert document["components"]["securitySchemes"]["apiKey"]["name"] == "X-API-Key"
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert (operation.get("security") == []) == (path in OPEN_PATHS), (path, method)
            for status, response in operation["responses"].items():
                if status.startswith("4"):
                    name = response["$ref"].rsplit("/", 1)[1]
                    error = document["components"]["responses"][name]
                    assert error["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
            if path not in OPEN_PATHS:
                assert "401" in operation["responses"], (path, method)


async def test_served_without_a_key_and_tells_no_secret(app: Starlette) -> None:
    """/openapi.json answers without a key (like /healthz) and holds no tool, key or file path."""
    async with serve_app(app) as url, httpx2.AsyncClient(base_url=url) as client:
        response = await client.get(OPENAPI_PATH)
        tools = await client.get("/v1/tools", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == openapi_document()
    assert tools.json()["tools"][0]["name"] == TOOL  # the name exists, behind the key
    for secret in (TOOL, KEY, KEY_HASH, "secretive", str(Path.cwd()), "127.0.0.1"):
        assert secret not in response.text


async def test_router_refusals_use_the_error_shape(app: Starlette) -> None:
    """No route, or the wrong method, is a JSON error like every other (not Starlette's plain text)."""
    key = {"Authorization": f"Bearer {KEY}"}
    async with serve_app(app) as url, httpx2.AsyncClient(base_url=url) as client:
        no_route = await client.get("/v1/nope", headers=key)
        newline = await client.get("/v1/approvals/x%0A/decision", headers=key)  # no mount matches a newline
        wrong_method = await client.get("/v1/tools/anything/invoke", headers=key)
        no_key = await client.get("/v1/nope")
    for response, status in ((no_route, 404), (newline, 404), (wrong_method, 405), (no_key, 401)):
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        assert set(response.json()["error"]) == {"code", "message"}
    assert wrong_method.json()["error"]["code"] == "method-not-allowed"
    assert wrong_method.headers["allow"] == "POST"
