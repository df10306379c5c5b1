"""An MCP upstream's resources, resource templates and prompts: listed, refreshed, read and got.

``McpItems`` belongs to one ``McpUpstream``. It keeps the upstream's own definitions (as the JSON it
sent), refetches a list when the upstream says it changed, and carries reads, gets and
subscriptions to the upstream's live session. Naming them for clients is ``gateway.items``'s job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client, MCPError

from gateway.core.errors import ItemNotFound, UpstreamError
from gateway.core.limits import MAX_ITEM_LIST_PAGES

__all__ = ["McpItems", "Session"]

log = logging.getLogger("gateway.upstreams.mcp")

T = TypeVar("T")
# The upstream's live session (reconnecting if need be) and how to give up a broken one.
Session = Callable[[], Awaitable[Client]]
Drop = Callable[[Client], Awaitable[None]]

# JSON-RPC codes an upstream answers an unknown resource or prompt with (-32002: MCP's "resource not found").
_NOT_FOUND = frozenset({types.INVALID_PARAMS, -32002})


class McpItems:
    """One upstream's resources, templates and prompts, and the requests that reach them."""

    def __init__(self, name: str, session: Session, drop: Drop, max_response_bytes: int) -> None:
        self.name = name
        self.max_response_bytes = max_response_bytes
        self._session = session
        self._drop = drop
        self.resources: list[dict[str, Any]] = []
        self.templates: list[dict[str, Any]] = []
        self.prompts: list[dict[str, Any]] = []
        self._listeners: list[Callable[[], None]] = []
        self._updated: list[Callable[[str], None]] = []
        self._background: set[asyncio.Task[None]] = set()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Be told after a list changed."""
        self._listeners.append(callback)

    def on_updated(self, callback: Callable[[str], None]) -> None:
        """Be told the upstream URI of a resource the upstream says was updated."""
        self._updated.append(callback)

    async def fetch(self, client: Client) -> None:
        """Learn every list the upstream's capabilities offer (a failing list is logged and left empty)."""
        caps = client.server_capabilities
        before = (self.resources, self.templates, self.prompts)
        if caps.resources is not None:
            self.resources = await self._list(client, "resources/list")
            self.templates = await self._list(client, "resources/templates/list")
        if caps.prompts is not None:
            self.prompts = await self._list(client, "prompts/list")
        if (self.resources, self.templates, self.prompts) != before:
            for listener in self._listeners:
                listener()

    async def _list(self, client: Client, method: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_ITEM_LIST_PAGES):
                page: Any
                if method == "resources/list":
                    page = await client.list_resources(cursor=cursor, cache_mode="refresh")
                    items: list[Any] = page.resources
                elif method == "resources/templates/list":
                    page = await client.list_resource_templates(cursor=cursor, cache_mode="refresh")
                    items = page.resource_templates
                else:
                    page = await client.list_prompts(cursor=cursor, cache_mode="refresh")
                    items = page.prompts
                found.extend(i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items)
                cursor = page.next_cursor
                if not cursor:
                    return found
            log.warning("upstream %s: %s has more than %d pages; the rest are not offered", self.name, method,
                        MAX_ITEM_LIST_PAGES)
        except Exception as exc:  # an upstream that claims the capability but fails the list
            log.warning("upstream %s: %s failed: %s", self.name, method, _describe(exc))
        return found

    def on_message(self, message: Any) -> bool:
        """Take up a list change or a resource update; False when the message is not about items."""
        if isinstance(message, types.ResourceUpdatedNotification):
            for callback in self._updated:
                callback(message.params.uri)
            return True
        if isinstance(message, (types.ResourceListChangedNotification, types.PromptListChangedNotification)):
            task = asyncio.create_task(self.refresh())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return True
        return False

    async def refresh(self) -> None:
        """List the upstream's resources and prompts again (a failure is logged; the old lists stay)."""
        try:
            await self.fetch(await self._session())
        except Exception as exc:
            log.warning("upstream %s: refreshing resources and prompts failed: %s", self.name, _describe(exc))

    def close(self) -> None:
        """Stop refreshes under way."""
        for task in list(self._background):
            task.cancel()

    async def read(self, uri: str, timeout: float) -> types.ReadResourceResult:
        """``resources/read`` of the upstream's own ``uri``."""
        return await self._request(f"read {uri}", lambda c: c.read_resource(uri), timeout)

    async def get(self, name: str, arguments: dict[str, str], timeout: float) -> types.GetPromptResult:
        """``prompts/get`` of the upstream's own prompt ``name``."""
        return await self._request(f"prompt {name}", lambda c: c.get_prompt(name, arguments or None), timeout)

    async def subscribe(self, uri: str, timeout: float, *, on: bool = True) -> None:
        """``resources/subscribe`` (or unsubscribe) of the upstream's own ``uri``."""
        # The upstream session speaks the handshake era, where these are still the way to subscribe (the
        # SDK's own methods for them warn that 2026-07-28 removed them, so the request is built here).
        request: Any = (types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)) if on
                        else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)))

        async def send(client: Client) -> types.EmptyResult:
            return await client.session.send_request(request, types.EmptyResult)
        await self._request(f"{'subscribe' if on else 'unsubscribe'} {uri}", send, timeout)

    async def _request(self, what: str, send: Callable[[Client], Awaitable[T]], timeout: float) -> T:
        client = await self._session()
        try:
            async with asyncio.timeout(timeout):
                result = await send(client)
        except TimeoutError:
            raise UpstreamError(f"{self.name}: {what} timed out after {timeout}s") from None
        except MCPError as exc:
            if exc.code in _NOT_FOUND:
                raise ItemNotFound(f"{self.name}: {what}: {exc}") from exc
            if exc.code == types.CONNECTION_CLOSED:
                await self._drop(client)
            raise UpstreamError(f"{self.name}: {what}: MCP error {exc.code}: {exc}") from exc
        except Exception as exc:  # the transport failed: the connection cannot be trusted any more
            await self._drop(client)
            raise UpstreamError(f"{self.name}: {what}: {_describe(exc)}") from exc
        # As for a tool's result: what is too big is not kept, audited or relayed.
        size = len(result.model_dump_json(by_alias=True, exclude_none=True)) if isinstance(result, types.Result) else 0
        if size > self.max_response_bytes:
            raise UpstreamError(f"{self.name}: {what}: response too large: {size} bytes, the limit is "
                                f"{self.max_response_bytes}")
        return result


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
