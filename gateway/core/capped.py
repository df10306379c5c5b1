"""Reading an HTTP body only up to a cap: the one loop every bounded fetch uses (IdP documents and tokens,
OpenAPI documents, upstream answers).

The declared ``Content-Length`` is checked before anything is read, then the bytes as they arrive, so a
body that lies about its length or has none stops at the cap too; leaving the rest unread closes the
connection.
"""

from __future__ import annotations

import httpx2

__all__ = ["TooLarge", "read_capped"]


class TooLarge(Exception):
    """A body went past its cap (``declared`` is the Content-Length it gave, if any); reading stopped there."""

    def __init__(self, limit: int, declared: int | None) -> None:
        self.limit, self.declared = limit, declared
        super().__init__(f"{declared} bytes declared, the limit is {limit}" if declared is not None
                         else f"more than {limit} bytes")


async def read_capped(response: httpx2.Response, limit: int) -> bytes:
    """The (decoded) body of a streamed ``response``, at most ``limit`` bytes; ``TooLarge`` past it."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit, int(declared))
    body = bytearray()
    async for chunk in response.aiter_bytes():
        if len(body) + len(chunk) > limit:
            raise TooLarge(limit, None)
        body += chunk
    return bytes(body)
