"""The petstore that petstore.yaml describes: a tiny Starlette app with in-memory data.

    python examples/openapi/petstore_app.py --port 8181

Tests import ``create_app()`` and serve it on a free loopback port.
"""

from __future__ import annotations

import argparse
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["create_app"]


def create_app() -> Starlette:
    """A fresh petstore with two pets; each app has its own data."""
    pets: dict[int, dict[str, Any]] = {
        1: {"id": 1, "name": "Rex", "tag": "dog", "tags": []},
        2: {"id": 2, "name": "Tom", "tag": "cat", "tags": []},
    }
    next_id = [3]

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"message": message}, status_code=status)

    def find(request: Request) -> dict[str, Any] | None:
        try:
            return pets.get(int(request.path_params["petId"]))
        except ValueError:
            return None

    async def list_pets(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "100"))
        except ValueError:
            return error(400, "limit must be an integer")
        tag = request.query_params.get("tag")
        found = [p for p in pets.values() if tag is None or p["tag"] == tag]
        return JSONResponse(found[:limit])

    async def create_pet(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the body must be JSON")
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
            return error(400, "name is required")
        pet = {"id": next_id[0], "name": body["name"], "tag": body.get("tag"), "tags": []}
        pets[pet["id"]] = pet
        next_id[0] += 1
        return JSONResponse(pet, status_code=201)

    async def get_pet(request: Request) -> Response:
        pet = find(request)
        return JSONResponse(pet) if pet else error(404, "no such pet")

    async def delete_pet(request: Request) -> Response:
        pet = find(request)
        if pet is None:
            return error(404, "no such pet")
        del pets[pet["id"]]
        return Response(status_code=204)

    async def replace_tags(request: Request) -> Response:
        pet = find(request)
        if pet is None:
            return error(404, "no such pet")
        tags = await request.json()
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return error(400, "the body must be a list of strings")
        pet["tags"] = tags
        return JSONResponse(pet)

    return Starlette(routes=[
        Route("/pets", list_pets, methods=["GET"]),
        Route("/pets", create_pet, methods=["POST"]),
        Route("/pets/{petId}", get_pet, methods=["GET"]),
        Route("/pets/{petId}", delete_pet, methods=["DELETE"]),
        Route("/pets/{petId}/tags", replace_tags, methods=["PUT"]),
    ])


def main() -> None:
    """Serve the petstore on loopback."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(create_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
