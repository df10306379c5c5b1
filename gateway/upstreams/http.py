"""An HTTP upstream: each tool is a method on a path template; arguments fill path, query, body.

Arguments only ever land in the path (percent-encoded), the query, or the JSON body: they can
never change the scheme, host or port of the request.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx2

from gateway.core.capped import TooLarge, read_capped
from gateway.core.errors import (
    InvalidArgumentsError,
    UpstreamCredentialsError,
    UpstreamDown,
    UpstreamError,
    UpstreamNotReached,
)
from gateway.core.limits import (
    MAX_RESPONSE_BYTES,
    UPSTREAM_CHECK_TIMEOUT_SECONDS,
    UPSTREAM_KEEPALIVE_SECONDS,
    UPSTREAM_MAX_CONNECTIONS,
)
from gateway.core.loopback import secure_url_problem
from gateway.core.scrub import REDACTED
from gateway.core.values import text
from gateway.observe.tracing import outgoing_headers
from gateway.upstreams.base import ToolProgress, ToolResult, UpstreamTool, listening, text_result
from gateway.upstreams.credentials import UpstreamCredentials
from gateway.upstreams.http_transport import LeanTransport, lean_transport

__all__ = ["HttpOperation", "HttpUpstream"]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MAX_ERROR_TEXT = 2_000


@dataclass(frozen=True, slots=True)
class HttpOperation:
    """How one tool maps onto an HTTP request."""

    tool: UpstreamTool
    method: str
    path: str
    query: tuple[str, ...] = ()
    body: bool = True
    path_params: tuple[str, ...] = field(default=())
    form: bool = False  # the body is sent as application/x-www-form-urlencoded, not JSON

    @classmethod
    def build(cls, tool: UpstreamTool, method: str, path: str, query: tuple[str, ...] = (),
              body: bool | None = None, *, form: bool = False) -> HttpOperation:
        """An operation with its path parameters found once."""
        sends_body = method in ("POST", "PUT", "PATCH") if body is None else body
        return cls(tool, method, path, query, sends_body, tuple(_PLACEHOLDER.findall(path)), form)


class HttpUpstream:
    """Tools that are HTTP operations on one base URL."""

    def __init__(self, name: str, base_url: str, operations: list[HttpOperation],
                 headers: Mapping[str, str] | None = None, client: httpx2.AsyncClient | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, *, lean: bool = True,
                 credentials: UpstreamCredentials | None = None) -> None:
        self.name = name
        self.lean = lean  # plain-http requests over gateway/upstreams/http_transport.py (issue 12)
        self.max_response_bytes = max_response_bytes
        self._base = base_url.rstrip("/")
        self._operations = {op.tool.name: op for op in operations}
        self._headers = dict(headers or {})
        # A token from the identity provider for each request (config ``auth:``), beside the static headers.
        self.credentials = credentials
        self._client = client
        self._own_client = client is None
        self.transport: LeanTransport | None = None  # set by start() when the lean transport carries requests

    @property
    def needs_caller_token(self) -> bool:
        """Whether its credential is made from the caller's token (token exchange): no use to a caller without one."""
        return self.credentials is not None and self.credentials.needs_caller_token

    @property
    def base_url(self) -> str:
        """Where every request of this upstream goes."""
        return self._base

    async def start(self) -> None:
        if self._client is None:
            # Idle connections are dropped well before common servers close theirs (uvicorn and
            # Node keep 5 s): a request written to a connection the server just closed never
            # arrives, and for an approved call that would be its one run.
            limits = httpx2.Limits(max_connections=UPSTREAM_MAX_CONNECTIONS,
                                   keepalive_expiry=UPSTREAM_KEEPALIVE_SECONDS)
            self.transport = lean_transport(limits) if self.lean else None
            self._client = httpx2.AsyncClient(follow_redirects=False, limits=limits, transport=self.transport)

    async def close(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.aclose()
        self._client = None
        if self.credentials is not None:
            await self.credentials.aclose()

    def tools(self) -> list[UpstreamTool]:
        return [op.tool for op in self._operations.values()]

    async def check(self) -> None:
        """Up when the base URL's host accepts a TCP connection (no request is sent: GETs may not be safe)."""
        parts = urlsplit(self._base)
        host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
        if not await listening(host, port, UPSTREAM_CHECK_TIMEOUT_SECONDS):
            raise UpstreamDown(f"{self.name}: nothing answers on {host}:{port}", "not reachable")

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        del callback  # an HTTP upstream's tools are fixed by the config

    def request_for(self, tool: str, arguments: dict[str, Any]) -> tuple[str, str, dict[str, Any], Any]:
        """(method, url, query, json body) for a call; the URL's origin is always the base URL's."""
        op = self._operations[tool]
        rest = dict(arguments)
        missing = [p for p in op.path_params if p not in rest]
        if missing:
            raise InvalidArgumentsError(f"missing path argument(s): {', '.join(missing)}")
        path = _PLACEHOLDER.sub(lambda m: _segment(m.group(1), rest.pop(m.group(1))), op.path)
        query = {k: _query_value(v) for k in op.query if k in rest and (v := rest.pop(k)) is not None}
        body = rest if op.body else None
        if not op.body:
            query.update({k: _query_value(v) for k, v in rest.items() if v is not None})
        return op.method, self._base + path, query, body

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float,
                   progress: ToolProgress | None = None) -> ToolResult:
        if self._client is None:
            raise UpstreamNotReached(f"upstream {self.name} is not started")
        method, url, query, body = self.request_for(tool, arguments)
        form = self._operations[tool].form and isinstance(body, dict)
        payload = {"data": {k: _query_value(v) for k, v in body.items() if v is not None}} if form else {"json": body}
        headers = outgoing_headers(self._headers)
        if self.credentials is not None:  # before anything is sent: no token, no request (UpstreamCredentialsError)
            headers = {**headers, "authorization": await self._authorization(url)}
        try:
            # One deadline for the whole exchange: httpx's timeout is per read, so an upstream
            # dripping a byte at a time would never trip it.
            async with asyncio.timeout(timeout), self._client.stream(
                method, url, params=query or None, headers=headers, timeout=timeout, **payload
            ) as response:
                content = await read_capped(response, self.max_response_bytes)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:  # no connection, so nothing was sent
            raise UpstreamNotReached(f"{self.name}: {method} {url} not reached: {type(exc).__name__}: {exc}") from exc
        except (httpx2.TimeoutException, TimeoutError) as exc:  # one read's timeout, or the whole deadline
            raise UpstreamError(f"{self.name}: {method} {url} timed out after {timeout}s") from exc
        except httpx2.HTTPError as exc:
            raise UpstreamError(f"{self.name}: {method} {url} failed: {type(exc).__name__}: {exc}") from exc
        except TooLarge as exc:
            raise UpstreamError(f"{self.name}: {method} {url}: response too large: {exc}") from exc
        if self.credentials is not None:
            content = self._credential_out(headers["authorization"], response.status_code, content)
        return _result(response, content)

    def _credential_out(self, authorization: str, status: int, content: bytes) -> bytes:
        """The body without the token it may echo (an echo service, a verbose error): the agent never reads it.
        A 401 makes the next call fetch a fresh token."""
        assert self.credentials is not None
        if status == 401:
            self.credentials.rejected(authorization)
        token = authorization.partition(" ")[2].encode()
        return content.replace(token, REDACTED.encode()) if token and token in content else content


    async def _authorization(self, url: str) -> str:
        """The credential for a request to ``url``, which must be https (an OpenAPI server URL is read at start)."""
        assert self.credentials is not None
        if secure_url_problem(url) is not None:
            raise UpstreamCredentialsError(f"No credential for upstream {self.name!r}: its URL is not https, so the"
                                           " token would travel in clear text.")
        return await self.credentials.authorization()


def _segment(name: str, value: Any) -> str:
    """One path segment from an argument; it can never become a different path.

    Servers decode ``%2F`` before routing and clients collapse ``.``/``..`` segments, so those are
    refused rather than encoded. Only a string, a number or a boolean names a segment: ``null``, a
    list or an object is refused rather than printed into the path.
    """
    if value is None or isinstance(value, (dict, list)):
        kind = "null" if value is None else "a list" if isinstance(value, list) else "an object"
        raise InvalidArgumentsError(f"path argument {name!r} must be a string or a number, not {kind}")
    segment = text(value)
    if segment in ("", ".", "..") or "/" in segment or "\\" in segment:
        raise InvalidArgumentsError(f"path argument {name!r} must be a single, non-empty path segment")
    return quote(segment, safe="")


def _query_value(value: Any) -> Any:
    """A query value, written as JSON writes it; a list of scalars becomes repeated keys (OpenAPI's default form).

    A ``null`` argument is left out of the query (by the caller), not sent as ``None``.
    """
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return [text(v) for v in value]
    return text(value)


def _result(response: httpx2.Response, content: bytes) -> ToolResult:
    """4xx/5xx are the tool's own errors (the model reads them); 2xx is the result."""
    is_error = response.status_code >= 400
    kind = response.headers.get("content-type", "")
    try:
        text = content.decode(response.encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = content.decode("utf-8", errors="replace")
    if "json" in kind:
        try:
            payload: Any = json.loads(content)
        except ValueError:
            payload = text
    else:
        payload = text
    if is_error:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        return ToolResult([{"type": "text", "text": f"HTTP {response.status_code}: {text[:_MAX_ERROR_TEXT]}"}],
                          payload if isinstance(payload, dict) else None, True)
    return text_result(payload)
