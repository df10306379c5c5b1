"""MCP clients that get their own tokens with OAuth, as their users run them, and gateways for them (imported by name).

    oauth_gateway       a gateway in front of the counting upstream whose only credentials are the IdP's tokens
                        (`auth.jwt`), publishing `auth.resource_metadata`; on a port chosen before it starts,
                        because the resource (its MCP endpoint's URL) is in its config
    python_oauth_call   the MCP Python SDK's ``OAuthClientProvider`` as the ``auth`` of its httpx2 client, under
                        the SDK's ``Client`` in either era: one call
    ts_oauth_call       the MCP TypeScript SDK's ``OAuthClientProvider`` on its Streamable HTTP transport
                        (mcp_oauth_client.mjs): v2 (npm @modelcontextprotocol/client) in either era, or v1
                        (npm @modelcontextprotocol/sdk, the line most TypeScript clients still run) in 2025-11-25

In both the SDK does everything a client does on its own: the 401, the protected resource metadata, the
authorization server's metadata, dynamic client registration, PKCE and the resource indicator, the token
request, the retry, and a step-up on a 403 ``insufficient_scope``. Where a person's browser would open, the
test signs in through the provider's dev login over HTTP (``idp.login``) and hands back where it redirected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import mcp_types as types
import yaml
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

sys.path.insert(0, str(Path(__file__).parent.parent))

from approval_support import CountingUpstream
from idp_support import Client as IdpClient
from idp_support import Idp
from loopback import serve_app
from thirdparty import mcp_ts_client

from gateway.app import build_app, server_options
from gateway.config.load import load_config

__all__ = ["Held", "OAuthGateway", "Seen", "held_tokens", "oauth_gateway", "python_oauth_call", "ts_oauth_call"]

Json = dict[str, Any]
STEP_SECONDS = 30.0
REDIRECT = "http://127.0.0.1:9/callback"  # never visited: the code is read from the provider's redirect


@dataclass
class OAuthGateway:
    """A running gateway with JWT auth and resource metadata."""

    url: str
    issuer: str
    root: Path

    @property
    def mcp_url(self) -> str:
        """The MCP endpoint, which is also the resource (RFC 8707) tokens are asked for."""
        return f"{self.url}/mcp"

    def audit_events(self) -> list[Json]:
        """Every audit event written so far."""
        path = self.root / "data" / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def oauth_gateway(root: Path, upstream: CountingUpstream, idp: Idp, policy: str, *,
                        jwt: Json | None = None, metadata: Json | None = None) -> AsyncIterator[OAuthGateway]:
    """Serve a gateway whose MCP clients sign in at ``idp``; ``jwt`` and ``metadata`` add to its `auth.jwt` entry
    and `auth.resource_metadata`."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    folder = root / f"oauth-gw-{port}"
    (folder / "policies").mkdir(parents=True)
    (folder / "policies" / "policy.yaml").write_text(policy, encoding="utf-8")
    issuer = {"issuer": idp.issuer, "audiences": [f"{url}/mcp"],
              "principal": {"id": "claims.sub", "groups": "has(claims.groups) ? claims.groups : []"},
              "required_scopes": ["mcp"], **(jwt or {})}
    spec = {"policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"},
            "audit": {"file": "data/audit.jsonl"},
            "auth": {"jwt": [issuer], "resource_metadata": {"resource": f"{url}/mcp", "authorization_servers":
                                                            [idp.issuer], "scopes_supported": ["mcp"],
                                                            **(metadata or {})}},
            "upstreams": [{"name": "ops", "mcp": {"url": f"{upstream.url}/mcp"}}]}
    (folder / "gateway.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    config = load_config(folder / "gateway.yaml")
    async with serve_app(build_app(config), startup=STEP_SECONDS, grace=1, options=server_options(config),
                         port=port):
        yield OAuthGateway(url, idp.issuer, folder)


@dataclass
class Seen:
    """What a client saw and did on its way to a result."""

    # method, URL, status, WWW-Authenticate of each answer the client got
    responses: list[tuple[str, str, int, str]] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)  # the MCP-Protocol-Version headers it sent
    sign_ins: list[str] = field(default_factory=list)  # the authorization URLs the client sent the user to
    registered: list[str] = field(default_factory=list)  # client ids from dynamic registration
    events: list[Json] = field(default_factory=list)

    def challenges(self, status: int) -> list[str]:
        """The WWW-Authenticate values of the gateway's answers with ``status``."""
        return [header for _, _, code, header in self.responses if code == status]


@dataclass(frozen=True)
class Held:
    """What a client holds from an earlier sign-in: its registration (a client of the IdP) and its tokens."""

    client: IdpClient
    tokens: Json


async def held_tokens(idp: Idp, gateway: OAuthGateway, user: str, scope: str) -> Held:
    """Tokens ``user`` got for the gateway earlier, with ``scope``, through the IdP's public client."""
    tokens = await idp.user_tokens(user, resource=gateway.mcp_url, scope=scope, client=idp.public)
    return Held(idp.public, {k: v for k, v in tokens.items() if k != "id_token"})


class _Memory:
    """The Python SDK's ``TokenStorage``, in memory."""

    def __init__(self, seen: Seen, held: Held | None) -> None:
        self.seen = seen
        self.tokens: OAuthToken | None = None if held is None else OAuthToken.model_validate(held.tokens)
        self.client: OAuthClientInformationFull | None = None if held is None else OAuthClientInformationFull(
            client_id=held.client.client_id, redirect_uris=[AnyUrl(REDIRECT)], token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"])

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info
        self.seen.registered.append(client_info.client_id)


async def python_oauth_call(gateway: OAuthGateway, idp: Idp, user: str, mode: str, tool: str, arguments: Json,
                            seen: Seen | None = None, held: Held | None = None) -> types.CallToolResult:
    """One tool call by the Python SDK's ``Client`` whose httpx2 client authenticates with ``OAuthClientProvider``;
    ``user`` signs in when the SDK sends them to the provider; ``held``: what its storage holds at the start."""
    seen = seen if seen is not None else Seen()
    landed: list[str] = []

    async def redirect(url: str) -> None:
        seen.sign_ins.append(url)
        landed.append(await idp.login(url, user))

    async def callback() -> AuthorizationCodeResult:
        query = {k: v[0] for k, v in parse_qs(urlsplit(landed.pop()).query).items()}
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    async def record(response: httpx2.Response) -> None:
        seen.responses.append((response.request.method, str(response.request.url), response.status_code,
                               response.headers.get("www-authenticate", "")))
        if version := response.request.headers.get("mcp-protocol-version"):
            seen.versions.add(version)

    provider = OAuthClientProvider(
        gateway.mcp_url, OAuthClientMetadata(client_name="gateway e2e (Python SDK)", redirect_uris=[AnyUrl(REDIRECT)],
                                             token_endpoint_auth_method="none"),
        _Memory(seen, held), redirect_handler=redirect, callback_handler=callback)
    http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(STEP_SECONDS), event_hooks={"response": [record]})
    async with http, Client(streamable_http_client(gateway.mcp_url, http_client=http),
                            mode=mode) as client:  # type: ignore[arg-type]
        return await client.call_tool(tool, arguments)


async def ts_oauth_call(gateway: OAuthGateway, idp: Idp, user: str, mode: str, tool: str, arguments: Json,
                        seen: Seen | None = None, held: Held | None = None, sdk: str = "v2") -> Json:
    """One tool call by the TypeScript SDK's client with its OAuth provider (a node process); the result or error.
    ``held``: what its provider holds at the start; ``sdk``: the SDK's line, v2 or v1 (2025-11-25 only)."""
    seen = seen if seen is not None else Seen()
    node, package = mcp_ts_client(sdk)
    spec: Json = {"sdk": sdk, "url": gateway.mcp_url, "mode": mode, "tool": tool, "arguments": arguments}
    if held is not None:
        spec["held"] = {"client_information": {"client_id": held.client.client_id, "redirect_uris": [REDIRECT],
                                               "token_endpoint_auth_method": "none"}, "tokens": held.tokens}
    process = await asyncio.create_subprocess_exec(
        node, str(Path(__file__).parent / "mcp_oauth_client.mjs"), str(package), json.dumps(spec),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        async with asyncio.timeout(STEP_SECONDS * 2):
            while line := await process.stdout.readline():
                event = json.loads(line)
                seen.events.append(event)
                if "authorize" in event:
                    seen.sign_ins.append(event["authorize"])
                    landed = await idp.login(event["authorize"], user)
                    process.stdin.write(json.dumps({"redirect": landed}).encode() + b"\n")
                    await process.stdin.drain()
                elif "registered" in event:
                    seen.registered.append(event["registered"])
                elif "response" in event:
                    method, url, status, challenge, version = event["response"]
                    seen.responses.append((method, url, status, challenge))
                    if version and url.startswith(gateway.mcp_url):
                        seen.versions.add(version)
                elif "result" in event or "error" in event:
                    return event
            stderr = (await process.stderr.read()).decode() if process.stderr else ""
            raise AssertionError(f"the TypeScript client ended without a result: {stderr[-2000:]}")
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
