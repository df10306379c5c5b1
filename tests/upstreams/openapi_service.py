"""A small httpbin-like service that serves its own API description at a URL, for the OpenAPI tests.

``HTTPBIN_SWAGGER`` is a Swagger 2.0 document shaped like httpbin's ``/spec.json`` (flasgger's
output: no operationIds, no ``host``, ``produces`` per operation, a path parameter with no type,
one typed "int", a form-data operation, a query parameter written OpenAPI 3 style), plus a body
parameter whose schema is a ``definitions`` entry and a shared ``#/parameters/`` entry.

``create_app(documents)`` serves the Swagger document at ``/spec.json``, each of ``documents`` at
its path, and the API itself, recording every API request it answers in ``app.state.requests``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.core.limits import MAX_OPENAPI_DOCUMENT_BYTES

__all__ = ["HTTPBIN_SWAGGER", "create_app"]

HUGE_MIB = MAX_OPENAPI_DOCUMENT_BYTES // (1024 * 1024) + 2  # what /huge.json streams: past the limit

HTTPBIN_SWAGGER: dict[str, Any] = {
    "swagger": "2.0",
    "info": {"title": "httpbin.org", "description": "A simple HTTP Request & Response Service.",
             "version": "0.9.2", "contact": {"responsibleDeveloper": "Kenneth Reitz"}},
    "basePath": "/",
    "schemes": ["https", "http"],
    "protocol": "https",
    "tags": [{"name": "HTTP Methods", "description": "Testing different HTTP verbs"},
             {"name": "Anything", "description": "Returns anything that is passed to request"}],
    "parameters": {
        "show_env": {"in": "query", "name": "show_env", "type": "boolean", "description": "Show the environment"},
    },
    "definitions": {
        "Pet": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"},
            "tag": {"type": "string", "x-nullable": True},
            "owner": {"$ref": "#/definitions/Owner"},
            "id": {"type": "integer", "readOnly": True}}},
        "Owner": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
    },
    "paths": {
        "/get": {"get": {
            "tags": ["HTTP Methods"], "summary": "The request's query parameters.",
            "produces": ["application/json"],
            "parameters": [{"$ref": "#/parameters/show_env"}],
            "responses": {"200": {"description": "The request's query parameters."}}}},
        "/anything/{anything}": {
            "parameters": [{"in": "path", "name": "anything"}],  # no type, as httpbin writes it
            "get": {"tags": ["Anything"], "summary": "Returns anything passed in request data.",
                    "produces": ["application/json"],
                    "responses": {"200": {"description": "Anything passed in request"}}},
            "post": {"tags": ["Anything"], "summary": "Returns anything passed in request data.",
                     "consumes": ["application/json", "application/xml"], "produces": ["application/json"],
                     "parameters": [
                         {"in": "query", "name": "dry_run", "type": "boolean"},
                         {"in": "body", "name": "pet", "required": True, "schema": {"$ref": "#/definitions/Pet"}}],
                     "responses": {"200": {"description": "Anything passed in request",
                                           "schema": {"$ref": "#/definitions/Pet"}}}}},
        "/status/{codes}": {"get": {
            "tags": ["Status codes"], "summary": "Return status code or random status code if more than one are given",
            "produces": ["text/plain"],
            "parameters": [{"in": "path", "name": "codes"}],
            "responses": {"100": {"description": "Informational responses"},
                          "200": {"description": "Success"}}}},
        "/bytes/{n}": {"get": {
            "tags": ["Dynamic data"], "summary": "Returns n random bytes generated with given seed",
            "produces": ["application/octet-stream"],
            "parameters": [{"in": "path", "name": "n", "type": "int"}],
            "responses": {"200": {"description": "Bytes."}}}},
        "/response-headers": {"get": {
            "tags": ["Response inspection"], "summary": "Returns a set of response headers from the query string.",
            "produces": ["application/json"],
            "parameters": [{"in": "query", "name": "freeform", "explode": True, "allowEmptyValue": True,
                            "schema": {"type": "object", "additionalProperties": {"type": "string"}},
                            "style": "form"}],
            "responses": {"200": {"description": "Response headers"}}}},
        "/redirect-to": {
            "get": {"tags": ["Redirects"], "summary": "302/3XX Redirects to the given URL.",
                    "produces": ["text/html"],
                    "parameters": [{"in": "query", "name": "url", "type": "string", "required": True},
                                   {"in": "query", "name": "status_code", "type": "int"}],
                    "responses": {"302": {"description": "A redirection."}}},
            "post": {"tags": ["Redirects"], "summary": "302/3XX Redirects to the given URL.",
                     "consumes": ["application/x-www-form-urlencoded"], "produces": ["text/html"],
                     "parameters": [{"in": "formData", "name": "url", "type": "string", "required": True},
                                    {"in": "formData", "name": "status_code", "type": "int"}],
                     "responses": {"302": {"description": "A redirection."}}}},
    },
}


def create_app(documents: dict[str, tuple[str, str]] | None = None) -> Starlette:
    """The service; ``documents`` maps a path to (text, media type) served as-is."""
    requests: list[dict[str, Any]] = []
    fetched: list[str] = []  # the documents asked for, by path
    served = dict(documents or {})

    async def record(request: Request) -> dict[str, Any]:
        raw = await request.body()
        seen = {"method": request.method, "path": request.url.path,
                "query": sorted(request.query_params.multi_items())}
        if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            seen["form"] = sorted((await request.form()).multi_items())
        else:
            seen["json"] = json.loads(raw) if raw else None
        requests.append(seen)
        return seen

    async def spec(request: Request) -> Response:
        return JSONResponse(HTTPBIN_SWAGGER)

    async def document(request: Request) -> Response:
        fetched.append(request.url.path)
        text, media_type = served[request.url.path]
        return Response(text, media_type=media_type)

    async def huge(request: Request) -> Response:
        async def spaces() -> AsyncIterator[bytes]:  # no content-length: only counting can stop it
            for _ in range(HUGE_MIB):
                yield b" " * 1024 * 1024
        return StreamingResponse(spaces(), media_type="application/json")

    async def echo(request: Request) -> Response:
        return JSONResponse(await record(request))

    async def status(request: Request) -> Response:
        await record(request)
        return PlainTextResponse("", status_code=int(request.path_params["codes"]))

    async def moved(request: Request) -> Response:
        return RedirectResponse("/spec.json", status_code=302)

    routes = [Route("/spec.json", spec), Route("/moved.json", moved), Route("/huge.json", huge),
              *(Route(path, document) for path in served),
              Route("/get", echo), Route("/anything/{anything}", echo, methods=["GET", "POST"]),
              Route("/status/{codes}", status), Route("/api/pets/{petId}", echo, methods=["GET", "POST"]),
              Route("/redirect-to", echo, methods=["GET", "POST"])]
    app = Starlette(routes=routes)
    app.state.requests = requests
    app.state.fetched = fetched
    return app


if __name__ == "__main__":  # launched by a gateway in the tests: python openapi_service.py PORT
    import sys

    import uvicorn

    uvicorn.run(create_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
