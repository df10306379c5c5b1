"""A body is read only up to its cap, whatever length it declares (an httpx2 in-memory transport serves it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

from gateway.core.capped import TooLarge, read_capped


async def _chunks(total: int, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, total, size):
        yield b"x" * min(size, total - start)


async def _read(total: int, declared: str | None, limit: int) -> bytes:
    def answer(request: httpx2.Request) -> httpx2.Response:
        headers = {} if declared is None else {"content-length": declared}
        return httpx2.Response(200, headers=headers, content=_chunks(total))

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as client:
        async with client.stream("GET", "http://127.0.0.1/doc") as response:
            return await read_capped(response, limit)


async def test_a_body_within_the_cap_is_read_whole():
    assert await _read(5_000, None, 5_000) == b"x" * 5_000


async def test_a_declared_length_over_the_cap_is_refused_before_reading():
    with pytest.raises(TooLarge) as refused:
        await _read(10, "999999", 5_000)
    assert (refused.value.declared, str(refused.value)) == (999_999, "999999 bytes declared, the limit is 5000")


@pytest.mark.parametrize("declared", [None, "10"])  # no length, or one that lies
async def test_a_body_past_the_cap_stops_at_the_cap(declared):
    with pytest.raises(TooLarge) as refused:
        await _read(50_000, declared, 5_000)
    assert (refused.value.declared, str(refused.value)) == (None, "more than 5000 bytes")
