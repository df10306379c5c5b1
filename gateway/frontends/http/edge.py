"""The HTTP edge: checks every request passes before any endpoint sees it, as plain ASGI middleware.

    HostOriginGuard   Host must be one the gateway serves (DNS rebinding: 421), and a browser's
                      Origin must be the gateway's own or allowed (cross-site requests: 403)
    JsonOnly          requests with a body (POST, PUT, PATCH) must say application/json (415), so a
                      page cannot send them as a CORS "simple request" without a preflight
    (ConnectionShares, in gateway/frontends/http/shares.py, comes here: each key's share of the connections,
                      taken before the body is read)
    BodyLimit         the body is read here, counted as it arrives and refused past a size (413) or a
                      deadline (408); the endpoint gets it whole, so it never waits on a slow client

Each refusal uses the REST API's one error body and closes the connection when the request body was
not read to its end.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.loopback import is_loopback
from gateway.frontends.rest import error_response

__all__ = ["LOOPBACK_NAMES", "BodyLimit", "HostOriginGuard", "HostRules", "JsonOnly", "is_loopback", "split_host"]

# Host names that always mean this machine, whatever DNS says, so an attacker cannot rebind them.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _header(scope: Scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope["headers"] if k == name]


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str,
                  close: bool = False) -> None:
    response = error_response(status, code, message)
    if close:  # the rest of the body is not wanted: let uvicorn drop the connection after the answer
        response.headers["connection"] = "close"
    await response(scope, receive, send)


def split_host(value: str) -> tuple[str, str]:
    """``name[:port]`` (or ``[v6]:port``) as (lower-case name, port or "")."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else ""
    name, sep, port = value.rpartition(":")
    return (name, port) if sep and port.isdigit() else (value, "")


def is_ip_literal(name: str) -> bool:
    """Whether a Host name is an IP address, which no DNS answer can point elsewhere."""
    try:
        ipaddress.ip_address(name[1:-1] if name.startswith("[") else name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostRules:
    """Which Host header values are served: names (any port), name:port pairs, IP literals, or anything."""

    names: frozenset[str] = frozenset()
    name_ports: frozenset[str] = frozenset()
    ip_literals: bool = False
    any_host: bool = False

    @classmethod
    def build(cls, entries: Iterable[str], ip_literals: bool) -> HostRules:
        """Rules from config entries (``name``, ``name:port``, ``*``)."""
        names, pairs, any_host = set(), set(), False
        for entry in entries:
            if entry.strip() == "*":
                any_host = True
                continue
            name, port = split_host(entry)
            (pairs.add(f"{name}:{port}") if port else names.add(name))
        return cls(frozenset(names), frozenset(pairs), ip_literals, any_host)

    def allows(self, host: str) -> bool:
        """Whether a request with this Host header is served."""
        if self.any_host:
            return True
        name, port = split_host(host)
        return (name in self.names or f"{name}:{port}" in self.name_ports
                or (self.ip_literals and is_ip_literal(name)))


class HostOriginGuard:
    """ASGI middleware: 421 for a Host the gateway does not serve, 403 for a foreign browser Origin.

    Requests without Origin (agents, curl, the MCP SDK) pass the Origin check: only browsers send it,
    and they always send it on cross-site POSTs, so it is what stops a page from calling the gateway.
    """

    def __init__(self, app: ASGIApp, hosts: HostRules, origins: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = _header(scope, b"host")
        if len(hosts) != 1 or not self.hosts.allows(hosts[0]):
            await _refuse(scope, receive, send, 421, "host-not-allowed",
                          "This gateway does not serve that Host. Add it to http.allowed_hosts in gateway.yaml.",
                          close=True)
            return
        origins = _header(scope, b"origin")
        if origins and not (len(origins) == 1 and self._allowed_origin(origins[0].strip().lower(), hosts[0])):
            await _refuse(scope, receive, send, 403, "origin-not-allowed",
                          "Requests from this web page's origin are not allowed. Add it to http.allowed_origins"
                          " in gateway.yaml.", close=True)
            return
        await self.app(scope, receive, send)

    def _allowed_origin(self, origin: str, host: str) -> bool:
        scheme, sep, netloc = origin.partition("://")
        if not sep or scheme not in ("http", "https"):
            return False  # "null" (sandboxed frames, file: pages) and anything odd
        return netloc == host.strip().lower() or origin in self.origins


def _is_json(content_type: str) -> bool:
    media, *params = (part.strip().lower() for part in content_type.split(";"))
    if media != "application/json":
        return False
    for param in filter(None, params):
        key, _, value = param.partition("=")
        if key.strip() != "charset" or value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


class JsonOnly:
    """ASGI middleware: POST, PUT and PATCH must carry ``Content-Type: application/json`` (415 otherwise).

    Browsers send text/plain, form and multipart bodies cross-site without asking (no CORS preflight);
    a JSON content type makes them ask first, and the answer is no.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in _BODY_METHODS:
            types = _header(scope, b"content-type")
            if len(types) != 1 or not _is_json(types[0]):
                await _refuse(scope, receive, send, 415, "unsupported-media-type",
                              "Send the body as JSON with 'Content-Type: application/json'.", close=True)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: read the request body here, at most ``max_bytes`` of it within ``timeout`` seconds.

    The size is checked against Content-Length before reading and counted while reading, so an
    oversized body is refused (413) after at most ``max_bytes``, never buffered whole. A body that
    does not arrive in time (a client dripping bytes, or stopping mid-body) gets 408. Either way the
    connection is closed. The endpoint behind gets the whole body in one message.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared and (not declared[0].strip().isdigit() or int(declared[0]) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # the client has gone: there is no one to answer
                    body: bytes = message.get("body", b"")
                    size += len(body)
                    if size > self.max_bytes:
                        await self._too_large(scope, receive, send)
                        return
                    chunks.append(body)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _refuse(scope, receive, send, 408, "request-timeout",
                          f"The request body did not arrive within {self.timeout:g} seconds.", close=True)
            return
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _refuse(scope, receive, send, 413, "body-too-large",
                      f"The request body is larger than {self.max_bytes} bytes (http.max_body_bytes).", close=True)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands out the body read already, then waits on the real one (for disconnects)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
