"""Keep an MCP upstream's HTTP connections reusable when the SDK closes an event stream early.

Over streamable HTTP a handshake-era server answers each POST with a short event stream, and the
SDK's client closes that response as soon as the JSON-RPC result has arrived, a moment before the
server ends the stream. An HTTP/1.1 response closed before its end cannot leave its connection in
the pool, so every call would open a new TCP connection. Here closing first reads what is left of
the stream, within a few bytes and milliseconds (``limits.py``): a stream that ends in time gives
its connection back for the next call; one that does not (a long-lived stream) is closed as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2

from gateway.core.limits import UPSTREAM_DRAIN_BYTES, UPSTREAM_DRAIN_SECONDS

__all__ = ["DrainOnClose"]


class DrainOnClose(httpx2.AsyncByteStream):
    """A response stream that, closed early, first reads its rest (bounded) so the connection can be reused."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._chunks: AsyncIterator[bytes] | None = None
        self._ended = False

    def _iterator(self) -> AsyncIterator[bytes]:
        if self._chunks is None:
            self._chunks = aiter(self._inner)
        return self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._iterator()
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                self._ended = True
                return
            yield chunk

    async def aclose(self) -> None:
        try:
            if not self._ended and self._chunks is not None:
                async with asyncio.timeout(UPSTREAM_DRAIN_SECONDS):
                    await self._drain(self._chunks)
        except (TimeoutError, httpx2.HTTPError, OSError):
            pass  # still streaming, or broken: the connection is closed, as it would have been
        finally:
            await self._inner.aclose()

    async def abort(self) -> None:
        """Close at once, without reading the rest (a call given up: its connection is not worth the wait)."""
        self._ended = True
        await self._inner.aclose()

    async def _drain(self, chunks: AsyncIterator[bytes]) -> None:
        left = UPSTREAM_DRAIN_BYTES
        async for chunk in chunks:
            left -= len(chunk)
            if left < 0:
                return
        self._ended = True
