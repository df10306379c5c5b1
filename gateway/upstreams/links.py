"""The URIs clients see for an upstream's resources: ``gateway://{upstream}/{the upstream's URI}``.

On their own (``items.py`` names whole catalogs with them) so that an upstream can rewrite the links in a
tool's result without importing the catalog, which imports the upstreams.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GATEWAY_SCHEME", "expose_links", "gateway_uri"]

GATEWAY_SCHEME = "gateway://"


def gateway_uri(upstream: str, uri: str) -> str:
    """The URI clients see for an upstream's resource (or template)."""
    return f"{GATEWAY_SCHEME}{upstream}/{uri}"


def expose_links(upstream: str, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool result's content blocks with the URIs of resource links and embedded resources made the
    gateway's, so a client reads them through the gateway as it would any listed resource."""
    out = []
    for block in content:
        if block.get("type") == "resource_link" and isinstance(block.get("uri"), str):
            block = {**block, "uri": gateway_uri(upstream, block["uri"])}
        elif (block.get("type") == "resource" and isinstance(block.get("resource"), dict)
              and isinstance(block["resource"].get("uri"), str)):
            block = {**block, "resource": {**block["resource"], "uri": gateway_uri(upstream, block["resource"]["uri"])}}
        out.append(block)
    return out
