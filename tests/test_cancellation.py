"""A cancelled wait stays cancelled, even when what it waited for ends in the same turn of the loop.

On Python 3.11 ``asyncio.wait_for`` returns the awaited result instead of raising ``CancelledError``
when the cancel and the completion meet; a loop around it (the supervisor's checks every tenth of a
second) then never ends, and the gateway's shutdown hangs on it. ``asyncio.timeout`` does not lose
the cancel, so the gateway's code uses it everywhere.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from gateway.upstreams.base import listening

PACKAGE = Path(__file__).parent.parent / "gateway"


async def test_a_check_cancelled_as_its_connection_is_refused_stays_cancelled(monkeypatch):
    connecting: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    async def open_connection(host: str, port: int) -> object:
        return await connecting

    monkeypatch.setattr(asyncio, "open_connection", open_connection)
    check = asyncio.create_task(listening("127.0.0.1", 9, 5.0))
    await asyncio.sleep(0)  # the check now waits for its connection
    connecting.set_exception(ConnectionRefusedError())  # refused, and cancelled, in one turn of the loop
    check.cancel()
    with pytest.raises(asyncio.CancelledError):
        await check


def test_the_gateway_waits_with_asyncio_timeout_not_wait_for():
    found = [f"{path.relative_to(PACKAGE.parent)}:{number}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if re.search(r"\bwait_for\(", line)]
    assert found == [], "asyncio.wait_for loses a cancel that meets completion on Python 3.11; use asyncio.timeout"
