"""A lean HTTP/1.1 transport under httpx2 for plain-``http://`` upstreams (issue 12: the cost of the hop).

httpx2 builds the request (URL, query, headers, JSON body) and reads the response (content
decoding, charset, errors) exactly as before; only the wire below it is replaced. httpcore's pool
checks every pooled connection on every request and every response close, each check a ``poll(2)``
behind several layers of anyio attributes: with 32 calls in flight that scan was a fifth of the
gateway's CPU per REST call. Here the connections are ``asyncio.Protocol`` objects parsed by
httptools: the event loop tells a connection at once when the server closes it, so an idle
connection is reused without a system call, and the pool is a stack of idle connections per origin.

What it does not carry goes to ``fallback`` (httpx2's own transport) unchanged: ``https://``,
HEAD, a request body without a Content-Length. The same guarantees as httpcore hold: at most
``max_connections`` connections, idle ones dropped after ``keepalive_expiry`` seconds, connect
failures raise ``httpx2.ConnectError`` / ``ConnectTimeout`` (nothing was sent), and a connection is
reused only when its response was read to the end and the server did not ask to close it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from urllib.request import getproxies

import httptools
import httpx2

__all__ = ["LeanTransport", "lean_transport", "proxied_environment"]

# A connection stops reading from its socket while this much of a response body waits to be taken.
_READ_AHEAD_BYTES = 256 * 1024
# Responses whose body is not delimited by Content-Length or chunks: it ends when the server closes.
_NO_BODY_STATUSES = frozenset({204, 304})


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one response at a time."""

    def __init__(self, origin: tuple[str, int]) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._wake: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.until_close = False  # the body ends when the connection does
        self.keep_alive = False
        self.error: Exception | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        if self.complete:  # bytes after the response, on an idle connection: not one to reuse
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx2.RemoteProtocolError(f"malformed HTTP response: {exc}"))
        self._notify()

    def eof_received(self) -> bool:
        self.closed = True
        if self.until_close and self.headers_done:
            self.complete = True
        self._notify()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.until_close and self.headers_done and exc is None:
            self.complete = True
        self._notify()

    # -- httptools callbacks -----------------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the real one follows
            self.headers, self.reason = [], b""
            return
        self.status = status
        self.headers_done = True
        names = {name.lower() for name, _ in self.headers}
        self.until_close = (status not in _NO_BODY_STATUSES and b"content-length" not in names
                            and b"transfer-encoding" not in names)

    def on_body(self, body: bytes) -> None:
        if not self.headers_done:
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _READ_AHEAD_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if not self.headers_done:
            return  # the end of an interim answer
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive() and not self.until_close

    # -- used by the transport ---------------------------------------------------------------------

    def _fail(self, error: Exception) -> None:
        self.error = error
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _notify(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _wait(self, timeout: float | None) -> None:
        """Until the protocol has something new (data, the end, the close), or ``ReadTimeout``."""
        wake = self._wake = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await wake
        except TimeoutError:
            raise httpx2.ReadTimeout("timed out reading the response") from None

    def send(self, data: bytes) -> None:
        """Start a request: reset the response state and write the bytes."""
        assert self.transport is not None
        self._reset()
        self._parser = httptools.HttpResponseParser(self)
        self.transport.write(data)

    async def response_head(self, timeout: float | None) -> None:
        """Wait for the status line and headers."""
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            if self.closed:
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
            await self._wait(timeout)

    async def body(self, timeout: float | None) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive."""
        while True:
            while self.chunks:
                chunk = self.chunks.popleft()
                self.buffered -= len(chunk)
                if self.paused and self.buffered <= _READ_AHEAD_BYTES // 2 and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                yield chunk
            if self.complete:
                return
            if self.error is not None:
                raise self.error
            if self.closed:
                raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
            await self._wait(timeout)

    def reusable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection may carry another request."""
        return not self.closed and self.transport is not None and not self.transport.is_closing() \
            and now - self.idle_since < expiry

    def close(self) -> None:
        """Drop the connection."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _ResponseBody(httpx2.AsyncByteStream):
    """A response body on its connection; closing it puts the connection back (or drops it)."""

    def __init__(self, transport: LeanTransport, connection: _Connection, timeout: float | None) -> None:
        self._transport = transport
        self._connection = connection
        self._timeout = timeout
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._connection.body(self._timeout):
                yield chunk
        except (OSError, ConnectionError) as exc:
            raise httpx2.ReadError(str(exc)) from exc

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self._transport.release(self._connection)


class LeanTransport(httpx2.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over asyncio protocols for ``http://``; everything else goes to ``fallback``."""

    def __init__(self, fallback: httpx2.AsyncBaseTransport, *, max_connections: int, keepalive_expiry: float) -> None:
        self._fallback = fallback
        self._expiry = keepalive_expiry
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._max = max_connections
        self._slots = asyncio.Semaphore(max_connections)  # one per request in flight: connections <= this
        self.requests = 0  # requests this transport carried itself (not the fallback's)
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme != "http" or request.method == "HEAD" or "transfer-encoding" in request.headers:
            return await self._fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        head = [f"{request.method} ".encode("ascii"), url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        try:
            async with asyncio.timeout(timeouts.get("pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx2.PoolTimeout("timed out waiting for a connection") from None
        try:
            connection = await self._connection((url.host, url.port or 80), timeouts.get("connect"))
        except BaseException:
            self._slots.release()
            raise
        self.requests += 1
        try:
            connection.send(b"".join(head) + body)
            await connection.response_head(timeouts.get("read"))
        except BaseException as exc:
            connection.close()
            self._slots.release()
            if isinstance(exc, OSError):
                raise httpx2.ReadError(str(exc)) from exc
            raise
        return httpx2.Response(connection.status, headers=connection.headers,
                               stream=_ResponseBody(self, connection, timeouts.get("read")),
                               extensions={"http_version": b"HTTP/1.1", "reason_phrase": connection.reason})

    async def _connection(self, origin: tuple[str, int], timeout: float | None) -> _Connection:
        """An idle connection to ``origin`` that is still good, else a new one."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.reusable(now, self._expiry):
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await loop.create_connection(lambda: _Connection(origin), origin[0], origin[1])
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"timed out connecting to {origin[0]}:{origin[1]}") from None
        except OSError as exc:
            raise httpx2.ConnectError(str(exc)) from exc
        return protocol

    def release(self, connection: _Connection) -> None:
        """A response is closed: keep its connection for the next request when it can carry one."""
        self._slots.release()
        if (connection.complete and connection.keep_alive and not connection.closed and not connection.chunks
                and not self._closed and self.idle < self._max):  # idle ones too stay within the limit
            connection.idle_since = time.monotonic()
            self._idle.setdefault(connection.origin, []).append(connection)
        else:
            connection.close()

    @property
    def idle(self) -> int:
        """Connections kept for reuse now."""
        return sum(len(idle) for idle in self._idle.values())

    async def aclose(self) -> None:
        self._closed = True  # responses still being read close their connections when they end
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        await self._fallback.aclose()


def proxied_environment() -> bool:
    """Whether httpx2 (``trust_env``) would send some request through a proxy named in the environment.

    httpx2 reads the same ``urllib.request.getproxies()``: a proxy for ``http``, ``https`` or ``all``
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, either case), unless ``NO_PROXY`` lists ``*``; other
    ``NO_PROXY`` entries exempt only some hosts. (tests/upstreams/test_http_transport.py compares this with
    httpx2's own reading of the environment.)
    """
    found = getproxies()
    if any(host.strip() == "*" for host in found.get("no", "").split(",")):
        return False
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def lean_transport(limits: httpx2.Limits) -> LeanTransport | None:
    """The lean transport over httpx2's own (with the same limits), or None when the environment names a
    proxy: httpx2 routes through it only with its own transports, so then everything stays with them."""
    if proxied_environment():
        return None
    assert limits.max_connections is not None and limits.keepalive_expiry is not None
    return LeanTransport(httpx2.AsyncHTTPTransport(limits=limits), max_connections=limits.max_connections,
                         keepalive_expiry=limits.keepalive_expiry)
