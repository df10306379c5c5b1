"""An OpenAPI upstream: every operation in the document becomes a tool on an ``HttpUpstream``
(how an operation becomes a tool: ``openapi_operations``).

The document is a file (read when the upstream is built, so its errors stop the config) or a URL
(fetched when the upstream starts, with the upstream's HTTP client); OpenAPI 3.0, 3.1 or Swagger 2.0,
with external ``$ref``s (see ``openapi_spec``). References are inlined by ``openapi_refs``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import urljoin, urlsplit

import httpx2

from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError
from gateway.core.limits import MAX_RESPONSE_BYTES
from gateway.core.sourcemap import YamlDocument
from gateway.upstreams.credentials import UpstreamCredentials
from gateway.upstreams.http import HttpOperation, HttpUpstream
from gateway.upstreams.openapi_operations import BODY, operations
from gateway.upstreams.openapi_refs import Where
from gateway.upstreams.openapi_spec import SpecBundle, fetch_bundle, is_url, load_bundle, read_spec_file

__all__ = ["OpenApiSource", "check_openapi", "load_openapi", "openapi_upstream", "operations_from_openapi"]

_SERVER_VARIABLE = re.compile(r"\{([^}]+)\}")


class OpenApiSource(Protocol):
    """Where an OpenAPI upstream's document is and which of its operations become tools (the config's
    ``openapi:`` block has this shape; upstreams never read config models)."""

    @property
    def spec(self) -> str: ...  # a file (relative to the config) or an http(s) URL
    @property
    def base_url(self) -> str | None: ...
    @property
    def include(self) -> Sequence[str]: ...
    @property
    def exclude(self) -> Sequence[str]: ...


class _Built(NamedTuple):
    """What an upstream needs from a document: where requests go, the operations, the wrapped ones."""

    base_url: str
    operations: list[HttpOperation]
    wrapped: frozenset[str]


def load_openapi(path: Path) -> dict[str, Any]:
    """The OpenAPI document at ``path`` (JSON or YAML) in 3.x shape; raises ``ConfigError`` naming file:line:col."""
    data = read_spec_file(path).data
    assert isinstance(data, dict)  # read_spec_file guarantees a mapping
    return data


def operations_from_openapi(document: dict[str, Any], include: list[str], exclude: list[str],
                            *, source: str = "<openapi>") -> list[HttpOperation]:
    """One HTTP operation per included OpenAPI operation; ``source`` names the file in errors.

    An operation whose body is not an object takes it as the ``body`` argument, which only the
    upstream from ``openapi_upstream`` unwraps (a plain ``HttpUpstream`` would send ``{"body": ...}``).
    """
    bundle = SpecBundle(YamlDocument(source, document), source)
    return [op for op, _ in operations(bundle, include, exclude)]


def openapi_upstream(name: str, spec: OpenApiSource, base_dir: Path, headers: dict[str, str],
                     client: httpx2.AsyncClient | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES,
                     credentials: UpstreamCredentials | None = None) -> HttpUpstream:
    """An ``HttpUpstream`` from the spec the config names: a file (read now, relative to ``base_dir``)
    or a URL (fetched when the upstream starts)."""
    if is_url(spec.spec):
        return _OpenApiUpstream(name, spec.base_url or "", [], headers, client, wrapped=frozenset(),
                                max_response_bytes=max_response_bytes, fetch=(spec.spec, spec),
                                credentials=credentials)
    path = Path(os.path.expanduser(spec.spec))
    built = _build(name, spec, load_bundle(path if path.is_absolute() else base_dir / path), None)
    return _OpenApiUpstream(name, built.base_url, built.operations, headers, client, wrapped=built.wrapped,
                            max_response_bytes=max_response_bytes, credentials=credentials)


def check_openapi(name: str, spec: OpenApiSource, base_dir: Path, *, fetch: bool) -> list[Diagnostic]:
    """What is wrong with the upstream's spec; a URL spec is fetched only when ``fetch`` (as `gateway check` does).

    Runs the fetch on its own event loop in a worker thread, so it works whether or not the caller
    is inside one.
    """
    async def probe() -> None:
        upstream = openapi_upstream(name, spec, base_dir, {})
        try:
            await upstream.start()
        finally:
            await upstream.close()

    try:
        if not is_url(spec.spec):
            openapi_upstream(name, spec, base_dir, {})
        elif fetch:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, probe()).result()
    except ConfigError as exc:
        return exc.diagnostics
    return []


class _OpenApiUpstream(HttpUpstream):
    """An HTTP upstream where a non-object request body arrives as the ``body`` argument.

    With ``fetch`` (the spec's URL and the config), the operations come from the document fetched
    on the first successful ``start``; until then the upstream has no tools.
    """

    def __init__(self, name: str, base_url: str, operations: list[HttpOperation], headers: dict[str, str],
                 client: httpx2.AsyncClient | None, *, wrapped: frozenset[str],
                 max_response_bytes: int = MAX_RESPONSE_BYTES,
                 fetch: tuple[str, OpenApiSource] | None = None,
                 credentials: UpstreamCredentials | None = None) -> None:
        super().__init__(name, base_url, operations, headers, client, max_response_bytes, credentials=credentials)
        self._wrapped = wrapped  # tool names whose body is the ``body`` argument
        self._fetch = fetch

    async def start(self) -> None:
        await super().start()
        if self._fetch is None or self._operations:
            return
        url, spec = self._fetch
        assert self._client is not None  # HttpUpstream.start made one
        # The spec is fetched without the upstream's headers or token: they are credentials for the API,
        # and the spec may live elsewhere.
        built = _build(self.name, spec, await fetch_bundle(self._client, url), url)
        self._base = built.base_url.rstrip("/")
        self._operations = {op.tool.name: op for op in built.operations}
        self._wrapped = built.wrapped

    def request_for(self, tool: str, arguments: dict[str, Any]) -> tuple[str, str, dict[str, Any], Any]:
        method, url, query, body = super().request_for(tool, arguments)
        if tool in self._wrapped and isinstance(body, dict):
            body = body.get(BODY)  # absent: no body at all
        return method, url, query, body


def _build(name: str, spec: OpenApiSource, bundle: SpecBundle, spec_url: str | None) -> _Built:
    found = operations(bundle, spec.include, spec.exclude)
    if not found:
        raise ConfigError([Diagnostic(
            "openapi-no-operations", f"upstream {name!r}: no operations left after include/exclude",
            bundle.root.file, hint=f"include {spec.include} and exclude {spec.exclude} match no operationId")])
    base_url = spec.base_url or _server_url(bundle.root, spec_url)
    return _Built(base_url, [op for op, _ in found], frozenset(op.tool.name for op, wraps in found if wraps))


def _server_url(doc: YamlDocument, spec_url: str | None) -> str:
    """The first ``servers[].url``, with its variables at their defaults, resolved against the spec's
    URL when it has one; must be absolute."""
    servers = doc.data.get("servers")
    server = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], dict) else {}
    raw = server.get("url")
    found = server.get("variables")
    variables = found if isinstance(found, dict) else {}

    def default(m: re.Match[str]) -> str:
        var = variables.get(m.group(1))
        return str(var.get("default", m.group(0))) if isinstance(var, dict) else m.group(0)

    url = _SERVER_VARIABLE.sub(default, raw) if isinstance(raw, str) else ""
    if spec_url is not None:  # OpenAPI: a relative server URL is relative to where the document is
        url = urljoin(spec_url, url or "/")
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.hostname and "{" not in url:
        return url
    where: Where = ("servers", 0, "url") if raw is not None else ("servers",)
    pos = doc.position(where)
    got = f"servers[0].url is {raw!r}" if raw is not None else "the document has no servers[].url"
    raise ConfigError([Diagnostic(
        "openapi-server", f"no absolute http(s) base URL: {got}", doc.file, pos.line, pos.column,
        hint="set base_url under the upstream's openapi config, e.g. base_url: https://api.example.com")])
