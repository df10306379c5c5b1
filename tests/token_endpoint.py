"""A small OAuth token endpoint of our own for tests, served on loopback: it counts what it is asked and can
misbehave on purpose (redirect, huge, slow, refuse). The real IdP (tests/idp_support.py) checks the grants
as the standards say; this one lets a test control each answer.

Imported by name (``from token_endpoint import TokenEndpointApp``).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

__all__ = ["CLIENT_ID", "CLIENT_SECRET", "TokenEndpointApp"]

CLIENT_ID = "gateway-client"
CLIENT_SECRET = "client-secret-9f3e1c77ab"  # tests grep outputs for it


@dataclass
class TokenEndpointApp:
    """The endpoint's state: what it was asked, what it answers next."""

    expires_in: Any = 300
    issuer: str = ""  # set once served (discovery names it)
    requests: list[dict[str, str]] = field(default_factory=list)
    gate: asyncio.Event | None = None  # when set, /token waits for it before answering
    refuse: str | None = None  # an OAuth error code to answer with (400) instead of a token
    _serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def app(self) -> Starlette:
        """The ASGI app: /token, discovery, and the misbehaving routes."""
        return Starlette(routes=[
            Route("/token", self._token, methods=["POST"]),
            Route("/.well-known/openid-configuration", self._discovery, methods=["GET"]),
            Route("/bad/.well-known/openid-configuration", self._bad_discovery, methods=["GET"]),
            Route("/redirect", lambda r: RedirectResponse("/token", status_code=307), methods=["POST"]),
            Route("/huge", self._huge, methods=["POST"]),
            Route("/echo-secret", self._echo_secret, methods=["POST"]),
            Route("/not-bearer", lambda r: JSONResponse({"access_token": "x", "token_type": "mac"}),
                  methods=["POST"]),
        ])

    async def _token(self, request: Request) -> Response:
        form = dict(await request.form())
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            client, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            form.update(client_id=client, client_secret=secret)
        self.requests.append({k: str(v) for k, v in form.items()})
        if self.gate is not None:
            await self.gate.wait()
        if (form.get("client_id"), form.get("client_secret")) != (CLIENT_ID, CLIENT_SECRET):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if self.refuse is not None:
            return JSONResponse({"error": self.refuse, "error_description": "refused on purpose"}, status_code=400)
        token = f"issued-{next(self._serial)}-for-{form.get('subject_token', 'the-gateway')[-12:]}"
        return JSONResponse({"access_token": token, "token_type": "Bearer", "expires_in": self.expires_in})

    async def _discovery(self, request: Request) -> Response:
        return JSONResponse({"issuer": self.issuer, "token_endpoint": f"{self.issuer}/token"})

    async def _bad_discovery(self, request: Request) -> Response:  # names a plain-http endpoint elsewhere
        return JSONResponse({"issuer": f"{self.issuer}/bad", "token_endpoint": "http://idp.example.com/token"})

    async def _huge(self, request: Request) -> Response:
        return JSONResponse({"access_token": "x" * 100_000, "token_type": "Bearer"})

    async def _echo_secret(self, request: Request) -> Response:
        form = await request.form()
        return JSONResponse({"error": f"bad secret {form.get('client_secret')}",
                             "error_description": f"you sent {form.get('client_secret')}"}, status_code=400)
