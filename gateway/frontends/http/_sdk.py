"""The one module of the HTTP edge that touches uvicorn's internals.

``protocol.EdgeHttpProtocol`` bounds uvicorn's httptools connection protocol. What it relies on of uvicorn
(0.54) is reached here, as named hooks and questions, and tests/frontends/http/test_sdk.py pins each one
on a real uvicorn protocol, so an upgrade that moves one fails in one place, naming it:

- ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol``, its constructor ``(config, server_state,
  app_state, _loop=None)`` and its asyncio ``Protocol`` methods;
- its httptools parser callbacks ``on_message_begin``, ``on_headers_complete``, ``on_response_complete``;
- its attributes ``loop`` (the event loop), ``connections`` (the server's open connections, this one added in
  ``connection_made``) and ``cycle`` (the current request's ``RequestResponseCycle``, None before the first
  request's headers, with ``response_complete`` and ``more_body``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["UvicornHttpProtocol"]


class UvicornHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the parser callbacks as hooks and what is read of it as methods."""

    # --- hooks for a subclass (each a no-op here) ---------------------------------------------------------

    def request_began(self) -> None:
        """A request's first byte was parsed (after uvicorn's ``on_message_begin``)."""

    def headers_arrived(self) -> None:
        """The request's headers are complete (before uvicorn's ``on_headers_complete`` starts the app)."""

    def response_sent(self) -> None:
        """The response went out whole (before uvicorn's ``on_response_complete`` arms keep-alive)."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.request_began()

    def on_headers_complete(self) -> None:
        self.headers_arrived()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self.response_sent()
        super().on_response_complete()

    # --- what is read of uvicorn ---------------------------------------------------------------------------

    def open_connections(self) -> Collection[Any]:
        """Every open connection of this server, this one included once it is made (uvicorn's ``connections``)."""
        connections: Collection[Any] = self.connections
        return connections

    def serving(self) -> bool:
        """Whether a request's answer is under way (``cycle`` set and its response not complete)."""
        return self.cycle is not None and not self.cycle.response_complete

    def body_unread(self) -> bool:
        """Whether the current request's body has not been read to its end (``cycle.more_body``)."""
        return self.cycle is not None and bool(self.cycle.more_body)

    def now(self) -> float:
        """The event loop's clock (uvicorn's ``loop``)."""
        return self.loop.time()

    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """Run ``callback`` on the connection's event loop after ``delay`` seconds."""
        return self.loop.call_later(delay, callback)
