"""The router's own refusals (no such route, method not allowed) in the REST API's one error body.

Starlette answers these in plain text by default; an API client, and the OpenAPI description
(``openapi_doc``), rely on every error being ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.frontends.rest import error_response

__all__ = ["json_http_errors"]

_CODES = {404: "not-found", 405: "method-not-allowed"}


async def _as_json(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # registered for HTTPException only
    response = error_response(exc.status_code, _CODES.get(exc.status_code, "http-error"), exc.detail)
    response.headers.update(exc.headers or {})  # e.g. Allow on a 405
    return response


def json_http_errors() -> Mapping[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """``exception_handlers`` for a Starlette app: HTTP errors raised by routing, as JSON."""
    return {HTTPException: _as_json}
