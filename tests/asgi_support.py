"""ASGI pieces the gateway tests put in front of a real upstream to see what reached it."""

from __future__ import annotations

from typing import Any

from starlette.types import Message, Receive

__all__ = ["read_request"]


async def read_request(receive: Receive) -> tuple[bytes, Receive]:
    """A request's whole body, and a ``receive`` that hands it on to the app as if it had not been read."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        answer: Any = await receive()
        return answer

    return body, replay
