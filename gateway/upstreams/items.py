"""Every MCP upstream's resources, resource templates and prompts, under the names clients see.

Prompts are named like tools: ``{prefix}_{prompt}``. Resources get a URI of the gateway's own,
``gateway://{upstream}/{the upstream's URI}``: the upstream's URI is kept whole after the prefix, so a
template stays a template (``gateway://ev/test://static/resource/{id}``) and any read names its
upstream. A read goes to the upstream its URI names and to no other; a URI that names no upstream,
or not in this form, is unknown. (Keeping upstreams' URIs as they are would make two upstreams that
use the same scheme, ``file:///`` say, ambiguous, and leave reads through templates nowhere to go.)

What a read reaches is decided on the URI the upstream will read: a listed resource asked for by its
exact URI is that resource; any other URI is normalised (``gateway.uris``: escapes decoded, dot
segments removed, what has two readings refused) and then is the listed resource it equals, the first
template it fits, or an unlisted URI, in the server's own order (the SDK's ``MCPServer`` looks up
concrete resources, then its templates). Template variables are those the SDK's ``UriTemplate.match``
gives (percent-decoded, ``{+path}`` across ``/``), so ``args`` holds what the server's function
receives; the normalised URI is the one sent upstream.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from gateway.core import uris
from gateway.core.errors import UnclearUriError
from gateway.core.limits import MAX_CACHED_RESOURCE_URIS
from gateway.policy.call import ItemInfo
from gateway.upstreams.links import GATEWAY_SCHEME, expose_links, gateway_uri
from gateway.upstreams.mcp.resources import McpItems
from gateway.upstreams.pinning import Pin, item_pin
from gateway.upstreams.registry import ToolRegistry

__all__ = ["GATEWAY_SCHEME", "ExposedItem", "ItemCatalog", "expose_links", "gateway_uri"]

log = logging.getLogger("gateway.items")


@dataclass(frozen=True, slots=True)
class ExposedItem:
    """A resource, template or prompt as clients see it: its definition renamed, and who owns it."""

    definition: dict[str, Any]  # the upstream's JSON with the gateway's URI or name in place
    owner: McpItems
    info: ItemInfo  # what policies see
    # A read through a template: its variables' values (a list for an explode variable such as {/path*}).
    variables: dict[str, str | list[str]] = field(default_factory=dict)
    listed: bool = True  # False for a read through a template, or of a URI the upstream did not list
    refused: str | None = None  # why it is refused: drifted from the tools lock under `on_drift: reject`


class ItemCatalog:
    """Gateway URI or prompt name → the owning upstream's item, read fresh from the upstreams."""

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._listeners: list[Callable[[], None]] = []
        for owner in self._owners().values():
            owner.on_change(self._changed)

    def _owners(self) -> dict[str, McpItems]:
        found: dict[str, McpItems] = {}
        for source in self._registry.sources:
            items = getattr(source.upstream, "items", None)
            if isinstance(items, McpItems):
                found[source.upstream.name] = items
        return found

    def on_change(self, callback: Callable[[], None]) -> None:
        """Be told after an upstream's resources or prompts changed."""
        self._listeners.append(callback)

    def on_updated(self, callback: Callable[[str], None]) -> None:
        """Be told the gateway URI of each resource an upstream says was updated."""
        for name, owner in self._owners().items():
            owner.on_updated(lambda uri, name=name: callback(gateway_uri(name, uri)))  # type: ignore[misc]

    def _changed(self) -> None:
        pins = self._registry.pins
        if pins is not None:  # checked now, so a drift is audited when it is listed, not when a client asks
            for kind, listed in (("resource", self.resources), ("resource_template", self.templates),
                                 ("prompt", self.prompts)):
                pins.forget_missing(kind, [i.info.name for i in listed(every=True)])
        for listener in self._listeners:
            listener()

    def _pinned(self, kind: str, item: ExposedItem, listed: dict[str, Any], every: bool = False) -> ExposedItem | None:
        """``item`` checked against the tools lock: None when it drifted and is hidden (unless ``every``), with
        ``refused`` set when it drifted under ``on_drift: reject``."""
        pins = self._registry.pins
        if pins is None:
            return item
        drift = pins.check_item(kind, item.info.name, item.info.upstream, listed)
        if drift is None or pins.on_drift == "warn" or every:
            return item
        return None if pins.on_drift == "hide" else replace(item, refused=drift.refusal())

    def resources(self, every: bool = False) -> list[ExposedItem]:
        """Every upstream's listed resources, in config order (without those the tools lock hides, unless ``every``)."""
        found = (self._pinned("resource", _resource(name, owner, r, "uri"), r, every)
                 for name, owner in self._owners().items() for r in owner.resources if isinstance(r.get("uri"), str))
        return [item for item in found if item is not None]

    def templates(self, every: bool = False) -> list[ExposedItem]:
        """Every upstream's resource templates (``resource.uri`` is the template, for policies)."""
        found = (self._pinned("resource_template", _resource(name, owner, t, "uriTemplate"), t, every)
                 for name, owner in self._owners().items()
                 for t in owner.templates if isinstance(t.get("uriTemplate"), str))
        return [item for item in found if item is not None]

    def resource(self, uri: str) -> ExposedItem | None:
        """The resource a read of the gateway ``uri`` reaches; None when the URI names no upstream.

        Raises ``UnclearUriError`` for a URI (other than a listed one) that has no single reading.
        """
        if not uri.startswith(GATEWAY_SCHEME):
            return None
        name, slash, inner = uri[len(GATEWAY_SCHEME):].partition("/")
        if not slash or not inner:
            return None
        owner = self._owners().get(name)
        exact = next((r for r in owner.resources if r.get("uri") == inner), None) if owner is not None else None
        if owner is not None and exact is not None:
            return self._pinned("resource", _resource(name, owner, exact, "uri"), exact)
        canonical = uris.normalise(inner)  # refused alike whether or not the upstream exists: no oracle
        if owner is None:
            return None
        for listed in owner.resources:
            if _normal_or_none(listed.get("uri")) == canonical:  # sent upstream as the upstream lists it
                return self._pinned("resource", _resource(name, owner, listed, "uri"), listed)
        for template in owner.templates:  # unlisted: described by the template it fits, if one does
            variables = _fit(canonical, template.get("uriTemplate"))
            if variables is not None:
                found = _resource(name, owner, {**template, "uri": canonical}, "uri")
                pinned = self._pinned("resource_template", _resource(name, owner, template, "uriTemplate"), template)
                return None if pinned is None else \
                    ExposedItem(found.definition, owner, found.info, variables, listed=False, refused=pinned.refused)
        found = _resource(name, owner, {"uri": canonical}, "uri")
        return ExposedItem(found.definition, owner, found.info, listed=False)

    def prompts(self, every: bool = False) -> list[ExposedItem]:
        """Every upstream's prompts under their exposed names (a name taken twice: the first keeps it), without
        those the tools lock hides (unless ``every``)."""
        found: dict[str, ExposedItem] = {}
        originals: dict[str, dict[str, Any]] = {}  # each prompt as its upstream lists it (what is pinned)
        owners = self._owners()
        for source in self._registry.sources:
            owner = owners.get(source.upstream.name)
            for prompt in owner.prompts if owner is not None else ():
                if not isinstance(prompt.get("name"), str):
                    continue
                name = source.namer(prompt["name"])
                if name in found:
                    log.warning("prompt name %r is exposed by both %s and %s; the first keeps it", name,
                                found[name].info.upstream, source.upstream.name)
                    continue
                assert owner is not None
                info = ItemInfo("prompt", name, source.upstream.name, prompt["name"], str(prompt.get("title") or ""),
                                str(prompt.get("description") or ""))
                found[name] = ExposedItem({**prompt, "name": name}, owner, info)
                originals[name] = prompt
        kept = (self._pinned("prompt", item, originals[name], every) for name, item in found.items())
        return [item for item in kept if item is not None]

    def pins(self) -> list[Pin]:
        """Every resource, template and prompt listed now as the tools lock pins it (`gateway tools --lock`)."""
        kinds = (("resource", self.resources, "uri"), ("resource_template", self.templates, "uriTemplate"),
                 ("prompt", self.prompts, "name"))
        found: list[Pin] = []
        for kind, listed, key in kinds:
            for item in listed(every=True):
                upstream_form = {**item.definition, key: item.info.upstream_name}
                found.append(item_pin(kind, item.info.name, item.info.upstream, upstream_form))
        return found

    def prompt(self, name: str) -> ExposedItem | None:
        """The prompt exposed as ``name``."""
        return next((p for p in self.prompts() if p.info.name == name), None)


def _resource(upstream: str, owner: McpItems, definition: dict[str, Any], key: str) -> ExposedItem:
    inner = definition[key]
    uri = gateway_uri(upstream, inner)
    info = ItemInfo("resource", uri, upstream, inner, str(definition.get("title") or ""),
                    str(definition.get("description") or ""), str(definition.get("mimeType") or ""))
    return ExposedItem({**definition, key: uri}, owner, info)


def _normal_or_none(uri: Any) -> str | None:
    """A listed URI's normal form, remembered (they are compared on every read); None when it has none."""
    return _listed_normal(uri) if isinstance(uri, str) else None


@functools.lru_cache(maxsize=MAX_CACHED_RESOURCE_URIS)  # upstreams' URIs only: a client's are not kept
def _listed_normal(uri: str) -> str | None:
    try:
        return uris.normalise(uri)
    except UnclearUriError:  # the upstream's own unclear URI is read only when asked for exactly
        return None


@functools.lru_cache(maxsize=MAX_CACHED_RESOURCE_URIS)
def _parsed(template: str) -> UriTemplate | None:
    try:
        return UriTemplate.parse(template)
    except InvalidUriTemplate:  # no SDK server could have it, and nothing tells how its server matches it
        return None


def _fit(uri: str, template: Any) -> dict[str, str | list[str]] | None:
    """The variables of the RFC 6570 ``template`` that ``uri`` fits, as the SDK's server decodes them, or None."""
    parsed = _parsed(template) if isinstance(template, str) else None
    return parsed.match(uri) if parsed is not None else None
