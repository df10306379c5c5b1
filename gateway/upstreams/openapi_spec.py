"""Reading an OpenAPI document as people have it: a file or a URL, JSON or YAML, OpenAPI 3.x or
Swagger 2.0 (converted), with the documents its external ``$ref``s name.

Where an external ``$ref`` may lead (so that a spec cannot make the gateway read arbitrary files
or call arbitrary hosts):

- a spec **file** may name files under its own directory (``other.yaml#/X``, ``./schemas/pet.json``),
  never a file outside it nor a URL;
- a spec **URL** may name URLs on its own origin (scheme, host and port), nothing else.

Every document is read once (so references between files may be cyclic) and at most
``MAX_OPENAPI_DOCUMENTS`` are read. A document that cannot be read is not an error by itself: the
operations whose ``$ref``s lead there are, so that ``exclude`` can leave them out.

After loading, every ``$ref`` is either local to the root (``#/...``) or names its document by
its absolute location (``/abs/other.yaml#/X``, ``http://host/other.json#/X``), the keys of
``SpecBundle.documents``: resolving a reference never depends on where it was written.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx2

from gateway.core.capped import TooLarge, read_capped
from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError
from gateway.core.limits import MAX_OPENAPI_DOCUMENT_BYTES, MAX_OPENAPI_DOCUMENTS, OPENAPI_FETCH_TIMEOUT_SECONDS
from gateway.core.sourcemap import YamlDocument, load_yaml
from gateway.upstreams.swagger2 import convert_swagger2

__all__ = ["SpecBundle", "fetch_bundle", "is_url", "load_bundle", "read_spec_file"]

# Values that are data, not schemas: never read as $refs.
_LITERAL_KEYS = frozenset({"example", "examples", "default", "enum", "const"})
_ACCEPT = {"accept": "application/json, application/yaml;q=0.9, */*;q=0.5"}


@dataclass
class SpecBundle:
    """The root document (in OpenAPI 3.x shape) and the external documents its $refs name."""

    root: YamlDocument
    location: str  # the root's absolute path or URL
    documents: dict[str, YamlDocument] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # location -> why it could not be read
    queued: set[str] = field(default_factory=set, repr=False)  # every external location asked for


def is_url(spec: str) -> bool:
    """Whether the config's ``spec`` names a URL rather than a file."""
    return spec.lower().startswith(("http://", "https://"))


def read_spec_file(path: Path) -> YamlDocument:
    """The OpenAPI document at ``path`` in OpenAPI 3.x shape; raises ``ConfigError`` naming file:line:col."""
    return _root(_read_file(path))


def load_bundle(path: Path) -> SpecBundle:
    """The spec file at ``path`` and the files next to it that its $refs name."""
    path = path.resolve()
    bundle = SpecBundle(read_spec_file(path), str(path))
    _collect(bundle, lambda location: _read_file(Path(location)), _file_target(path.parent))
    return bundle


async def fetch_bundle(client: httpx2.AsyncClient, url: str) -> SpecBundle:
    """The spec at ``url`` and the same-origin documents its $refs name, fetched with ``client``."""
    bundle = SpecBundle(_root(await _fetch(client, url)), url)
    pending = _absorb(bundle, bundle.location, bundle.root, _url_target(url))
    while pending:
        location = pending.pop(0)
        try:
            doc = await _fetch(client, location)
        except ConfigError as exc:
            bundle.failures[location] = exc.diagnostics[0].message
            continue
        pending += _absorb(bundle, location, doc, _url_target(url))
    return bundle


# --- one document ---------------------------------------------------------------------------------


def _read_file(path: Path) -> YamlDocument:
    file = str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_OPENAPI_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise ConfigError([Diagnostic("unreadable", f"cannot read OpenAPI spec {file}: {exc.strerror}", file,
                                      hint="check the upstream's openapi.spec path")]) from exc
    return _parse(raw, file, json_first=path.suffix.lower() == ".json")


async def _fetch(client: httpx2.AsyncClient, url: str) -> YamlDocument:
    """GET ``url`` within the fetch timeout and size cap; no redirects (the URL in the config is the one used)."""
    hint = "is the service up, and is openapi.spec the URL of its OpenAPI (or Swagger 2.0) document?"

    def unreachable(why: str) -> ConfigError:
        return ConfigError([Diagnostic("openapi-unreachable", f"cannot fetch OpenAPI spec {url}: {why}", url,
                                       hint=hint)])

    try:
        # One deadline for the whole fetch: httpx's timeout is per read, and a server dripping
        # bytes would never trip it.
        async with asyncio.timeout(OPENAPI_FETCH_TIMEOUT_SECONDS), client.stream(
            "GET", url, timeout=OPENAPI_FETCH_TIMEOUT_SECONDS, follow_redirects=False, headers=_ACCEPT,
        ) as response:
            if response.status_code != 200:
                where = response.headers.get("location")
                raise unreachable(f"HTTP {response.status_code}" + (f" (redirect to {where})" if where else ""))
            try:
                body = await read_capped(response, MAX_OPENAPI_DOCUMENT_BYTES)
            except TooLarge as exc:
                raise unreachable(str(exc)) from None
            kind = response.headers.get("content-type", "").lower()
    except (httpx2.TimeoutException, TimeoutError) as exc:
        raise unreachable(f"no answer within {OPENAPI_FETCH_TIMEOUT_SECONDS:g}s") from exc
    except httpx2.HTTPError as exc:
        raise unreachable(f"{type(exc).__name__}: {exc}") from exc
    path = urlsplit(url).path.lower()
    return _parse(bytes(body), url, json_first="json" in kind or path.endswith(".json")
                  or bytes(body).lstrip().startswith(b"{"))


def _parse(raw: bytes, file: str, *, json_first: bool) -> YamlDocument:
    if len(raw) > MAX_OPENAPI_DOCUMENT_BYTES:
        raise ConfigError([Diagnostic("openapi-too-large", f"more than {MAX_OPENAPI_DOCUMENT_BYTES} bytes", file)])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([Diagnostic("encoding", f"OpenAPI spec is not UTF-8: {exc.reason}", file)]) from exc
    if json_first:
        # JSON is parsed as JSON (YAML 1.1 reads some JSON numbers differently); its values have
        # no recorded positions, so later errors point at line 1 (and name the JSON path).
        try:
            return YamlDocument(file, json.loads(text))
        except json.JSONDecodeError as exc:
            raise ConfigError([Diagnostic("json-syntax", f"JSON syntax error: {exc.msg}", file,
                                          exc.lineno, exc.colno)]) from exc
    try:
        parsed, problems = load_yaml(text, file)
    except RecursionError as exc:  # a self-referencing YAML alias
        raise ConfigError([Diagnostic("yaml-syntax", "YAML nests too deeply (a recursive alias?)", file)]) from exc
    if parsed is None or problems:
        raise ConfigError(problems)
    return parsed


def _root(doc: YamlDocument) -> YamlDocument:
    """The document as OpenAPI 3.x: checked for a version we read, Swagger 2.0 converted."""
    if not isinstance(doc.data, dict):
        raise ConfigError([Diagnostic("openapi-document", "an OpenAPI document must be a mapping", doc.file)])
    data = doc.data
    if data.get("swagger") in ("2.0", 2.0) and "openapi" not in data:
        # Paths and operations keep their places, so the original positions still apply.
        return YamlDocument(doc.file, convert_swagger2(data), doc.positions, doc.key_positions, doc.text)
    version = data.get("openapi")
    if isinstance(version, str) and version.startswith("3."):
        return doc
    key = next((k for k in ("openapi", "swagger", "swaggerVersion") if k in data), None)
    found = f"{key}: {data[key]!r}" if key else "no openapi or swagger field"
    pos = doc.position((key,)) if key else doc.position(())
    hint = ("is this the API's OpenAPI document?" if key is None else
            "convert it to OpenAPI 3 (e.g. with swagger2openapi or the Swagger Editor)")
    raise ConfigError([Diagnostic("openapi-version", f"unsupported OpenAPI version ({found});"
                                  " the gateway reads OpenAPI 3.0, 3.1 and Swagger 2.0", doc.file,
                                  pos.line, pos.column, hint=hint)])


# --- external references --------------------------------------------------------------------------

# Where a $ref's document part leads from a document: an absolute location, or why it may not go there.
_Target = Callable[[str, str], "tuple[str | None, str]"]


def _file_target(root_dir: Path) -> _Target:
    def target(base: str, ref: str) -> tuple[str | None, str]:
        if "://" in ref or ref.lower().startswith("file:"):
            return None, "a spec file's $refs may name only files next to it, not URLs"
        resolved = (Path(base).parent / ref.split("?")[0]).resolve()
        if not resolved.is_relative_to(root_dir):
            return None, f"{resolved} is outside the spec's directory {root_dir}"
        return str(resolved), ""
    return target


def _url_target(root_url: str) -> _Target:
    origin = urlsplit(root_url)[:2]

    def target(base: str, ref: str) -> tuple[str | None, str]:
        resolved = urljoin(base, ref)
        if urlsplit(resolved)[:2] != origin:
            return None, f"{resolved} is not on the spec's origin {origin[0]}://{origin[1]}"
        return resolved, ""
    return target


def _collect(bundle: SpecBundle, read: Callable[[str], YamlDocument], target: _Target) -> None:
    pending = _absorb(bundle, bundle.location, bundle.root, target)
    while pending:
        location = pending.pop(0)
        try:
            doc = read(location)
        except ConfigError as exc:
            bundle.failures[location] = exc.diagnostics[0].message
            continue
        pending += _absorb(bundle, location, doc, target)


def _absorb(bundle: SpecBundle, location: str, doc: YamlDocument, target: _Target) -> list[str]:
    """Store ``doc`` with its $refs made absolute; the locations it names that are not yet read."""
    wanted: list[str] = []
    is_root = location == bundle.location

    def absolute(ref: str) -> str:
        where, _, pointer = ref.partition("#")
        if not where:
            return ref if is_root else f"{location}#{pointer}"
        resolved, why = target(location, where)
        if resolved is None:
            resolved = f"{location}->{where}"  # a key no document has; the failure says why
            bundle.failures[resolved] = why
        elif resolved == bundle.location:
            return f"#{pointer}"
        elif resolved not in bundle.queued:
            if len(bundle.queued) >= MAX_OPENAPI_DOCUMENTS:
                bundle.failures[resolved] = f"more than {MAX_OPENAPI_DOCUMENTS} documents are referenced"
            else:
                bundle.queued.add(resolved)
                wanted.append(resolved)
        return f"{resolved}#{pointer}"

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        return {k: (absolute(v) if k == "$ref" and isinstance(v, str) else v if k in _LITERAL_KEYS else walk(v))
                for k, v in node.items()}

    stored = YamlDocument(doc.file, walk(doc.data), doc.positions, doc.key_positions, doc.text)
    if is_root:
        bundle.root = stored
    else:
        bundle.documents[location] = stored
    return wanted
