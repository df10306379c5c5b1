"""uvicorn's httptools protocol with the bounds it lacks: a header deadline, a header size, a connection cap.

uvicorn reads a request's headers with no time limit and no size limit (httptools buffers any
amount), and its ``limit_concurrency`` only answers 503 once a request's headers are complete, so
1,000 clients that never finish their headers hold 1,000 connections. Here:

- a connection must deliver its request line and headers within ``header_timeout`` seconds of its
  first byte (or of connecting); otherwise it is closed, with a 408 if it had started a request;
- the request line and headers may not exceed ``max_header_bytes`` (431, then closed);
- past ``max_connections`` open connections, the one that has not served a request for longest
  (still sending its headers, or idle between requests) is closed to make room; only when every
  connection is busy is the newcomer answered 503. Slow clients thus make room for fast ones.

The body's size and deadline are enforced by ``gateway.frontends.http.edge.BodyLimit``. When a request
is refused while its headers or body are still arriving, the connection "lingers": it sends the
answer, half-closes, and discards input for a moment (``LINGER_*`` in limits.py) before closing, so
the client reads the answer rather than a reset.

What it uses of uvicorn it reaches through ``_sdk.UvicornHttpProtocol`` (the parser callbacks as hooks).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from gateway.core.limits import LINGER_MAX_BYTES, LINGER_SECONDS
from gateway.frontends.http._sdk import UvicornHttpProtocol

__all__ = ["EdgeHttpProtocol", "edge_protocol"]


def _plain(status: bytes, text: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: "
            + str(len(text)).encode() + b"\r\nconnection: close\r\n\r\n" + text)


_TIMEOUT = _plain(b"408 Request Timeout", b"The request headers did not arrive in time.")
_TOO_LARGE = _plain(b"431 Request Header Fields Too Large", b"The request headers are too large.")
_BUSY = _plain(b"503 Service Unavailable", b"The gateway has too many open connections.")


class EdgeHttpProtocol(UvicornHttpProtocol):
    """One client connection; the class attributes are set by ``edge_protocol``."""

    max_header_bytes: ClassVar[int]
    header_timeout: ClassVar[float]
    max_connections: ClassVar[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # waiting for (the rest of) a request line and headers
        self._head_bytes = 0
        self._head_started = False  # a byte of the current request has arrived
        self._head_timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0  # when this connection last stopped serving a request (or opened)
        self.raw: asyncio.Transport = None  # type: ignore[assignment]  # the socket's own transport
        self._facade: _LingeringTransport = None  # type: ignore[assignment]  # the transport uvicorn writes to
        self._lingering = False
        self._linger_bytes = 0
        self._linger_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.raw = transport
        self._facade = _LingeringTransport(transport, self)
        super().connection_made(self._facade)  # type: ignore[arg-type]
        self.idle_since = self.now()
        self._arm_head_timer()
        if len(self.open_connections()) > self.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)

    def eof_received(self) -> None:
        if self._lingering:
            self.raw.close()  # the client has stopped sending: nothing left to wait for

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._linger_bytes += len(data)
            if self._linger_bytes > LINGER_MAX_BYTES:
                self.raw.close()
            return
        if self._in_head:
            self._head_started = True
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_header_bytes and not self._facade.is_closing():
            self._close_with(_TOO_LARGE)

    # parser callbacks (``_sdk.UvicornHttpProtocol``'s hooks)

    def request_began(self) -> None:
        if not self._in_head:  # the next request on a kept-alive connection: its headers get a deadline too
            self._in_head, self._head_started, self._head_bytes = True, True, 0
            self._arm_head_timer()

    def response_sent(self) -> None:
        self.idle_since = self.now()

    def headers_arrived(self) -> None:
        self._in_head = False
        self._cancel_head_timer()

    # the bounds

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.call_later(self.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self._facade.is_closing():
            # a connection that never started a request is just closed, as an idle one would be
            self._close_with(_TIMEOUT if self._head_started else b"")

    def idle(self) -> bool:
        """Not serving a request: still reading headers, lingering, or between requests."""
        return self._in_head or self._lingering or not self.serving()

    def _make_room(self) -> None:
        idle = [c for c in self.open_connections()
                if isinstance(c, EdgeHttpProtocol) and c is not self and c.idle() and not c.raw.is_closing()]
        if idle:
            min(idle, key=lambda c: c.idle_since).raw.close()
        else:
            self._close_with(_BUSY)

    def _close_with(self, response: bytes) -> None:
        if response:
            self._facade.write(response)
        self._facade.close()

    def close_or_linger(self) -> None:
        """Close now if the client has sent everything it meant to; otherwise linger first."""
        self._cancel_head_timer()
        unread = (self._in_head and self._head_started) or self.body_unread()
        self._in_head = False
        if self._lingering or self.raw.is_closing():
            return
        if not unread or not self.raw.can_write_eof():
            self.raw.close()
            return
        self._lingering = True
        self.idle_since = self.now()
        self.raw.write_eof()  # the answer, then end-of-stream: the client reads both
        self.raw.resume_reading()
        self._linger_timer = self.call_later(LINGER_SECONDS, self.raw.close)


class _LingeringTransport:
    """The socket's transport as uvicorn sees it, whose ``close`` lingers when input is still arriving."""

    def __init__(self, transport: asyncio.Transport, protocol: EdgeHttpProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False

    def close(self) -> None:
        self._closed = True
        self._protocol.close_or_linger()

    def is_closing(self) -> bool:
        return self._closed or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def edge_protocol(max_header_bytes: int, header_timeout: float, max_connections: int) -> type[EdgeHttpProtocol]:
    """The protocol class uvicorn should use (``uvicorn.Config(http=...)``), with these bounds."""
    return type("BoundedEdgeHttpProtocol", (EdgeHttpProtocol,), {
        "max_header_bytes": max_header_bytes, "header_timeout": header_timeout, "max_connections": max_connections,
    })
