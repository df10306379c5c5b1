"""The HTTP operations the upstream tests declare, against the test services' echo routes."""

from __future__ import annotations

from gateway.upstreams.base import UpstreamTool
from gateway.upstreams.http import HttpOperation

__all__ = ["ITEM_OPERATIONS", "op"]


def op(name: str, method: str, path: str, query: tuple[str, ...] = (), body: bool | None = None) -> HttpOperation:
    return HttpOperation.build(UpstreamTool(name), method, path, query, body)


# Path arguments, query arguments and a JSON body, one method each: the services echo what reached them.
ITEM_OPERATIONS = [
    op("get_item", "GET", "/items/{item_id}/detail", query=("verbose",)),
    op("create_item", "POST", "/items", query=("dry_run",)),
    op("update_item", "PATCH", "/items/{item_id}"),
    op("delete_item", "DELETE", "/items/{item_id}"),
]
