"""``GET /.well-known/oauth-protected-resource``: the gateway's RFC 9728 protected resource metadata.

MCP clients (2025-11-25 and 2026-07-28 authorization) find it from the ``resource_metadata`` of a 401
(gateway/frontends/challenge.py), or by trying the well-known URLs: first the path form for the MCP
endpoint (``/.well-known/oauth-protected-resource/mcp``), then the root form. Both are served, open
(no credential: it is how a client learns where to get one) and cacheable; so is the path form of the
configured resource's own path when it is not ``/mcp`` (a gateway published under another path).
The document is built once, from plain values the composition root hands over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.core.limits import RESOURCE_METADATA_MAX_AGE_SECONDS
from gateway.frontends.challenge import Challenge

__all__ = ["WELL_KNOWN_PATH", "ProtectedResource", "protected_resource_routes"]

WELL_KNOWN_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """What the metadata says: the resource (the MCP endpoint's public URL), its authorization servers, scopes."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None = None
    resource_name: str | None = None
    resource_documentation: str | None = None
    resource_policy_uri: str | None = None
    resource_tos_uri: str | None = None
    challenge_scopes: tuple[str, ...] = ()  # what a 401 says to ask for (default: scopes_supported)

    @property
    def metadata_url(self) -> str:
        """Where the document is, by RFC 9728 section 3.1: the well-known path inserted before the resource's path."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN_PATH}{parts.path.rstrip('/')}"

    def document(self) -> dict[str, Any]:
        """The metadata (RFC 9728 section 2); tokens are read from the Authorization header only."""
        found: dict[str, Any] = {"resource": self.resource,
                                 "authorization_servers": list(self.authorization_servers),
                                 "bearer_methods_supported": ["header"]}
        if self.scopes_supported is not None:
            found["scopes_supported"] = list(self.scopes_supported)
        for name in ("resource_name", "resource_documentation", "resource_policy_uri", "resource_tos_uri"):
            if (value := getattr(self, name)) is not None:
                found[name] = value
        return found

    def challenge(self) -> Challenge:
        """What every refusal's ``WWW-Authenticate`` adds for this resource."""
        scopes = self.challenge_scopes or self.scopes_supported
        return Challenge(resource_metadata=self.metadata_url, scope=" ".join(scopes) if scopes else None)

    def paths(self) -> tuple[str, ...]:
        """The paths the document is served at: the root form, the MCP endpoint's, the resource's own."""
        own = f"{WELL_KNOWN_PATH}{urlsplit(self.resource).path.rstrip('/')}"
        return tuple(dict.fromkeys((WELL_KNOWN_PATH, f"{WELL_KNOWN_PATH}{MCP_PATH}", own)))


def protected_resource_routes(resource: ProtectedResource) -> list[Route]:
    """The open routes serving the metadata document (GET, and HEAD with it)."""
    body = json.dumps(resource.document(), separators=(",", ":")).encode()
    headers = {"cache-control": f"public, max-age={RESOURCE_METADATA_MAX_AGE_SECONDS}"}

    async def metadata(request: Request) -> Response:
        return Response(body, media_type="application/json", headers=headers)

    return [Route(path, metadata, methods=["GET"]) for path in resource.paths()]
