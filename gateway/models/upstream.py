"""One model upstream: an answer of its API, whole or as its stream of events (httpx2).

Which API, at which path and with which headers, is its dialect's (gateway/models/dialects/); this module
only sends, times and reads.

What the upstream sends is read as untrusted. Its size is capped as it arrives (MAX_MODEL_RESPONSE_BYTES
for a whole answer, MAX_MODEL_STREAM_BYTES for all of a stream's events) and so is the whole request's
duration, streamed or not (the entry's ``timeout``, not per read). Its JSON is read strictly: NaN,
Infinity or a lone surrogate make it a bad answer (502), never a response the gateway cannot write. Its
error text reaches the agent without credentials: a 401 or 403 gets a fixed message, and the configured
key and anything shaped like a key are taken out of every other message (gateway/core/scrub.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx2

from gateway.core.errors import ModelUpstreamError
from gateway.core.limits import (
    MAX_MODEL_ERROR_CHARS,
    MAX_MODEL_RESPONSE_BYTES,
    MAX_MODEL_STREAM_BYTES,
    MIN_SCRUBBED_ANSWER_SECRET_CHARS,
    UPSTREAM_KEEPALIVE_SECONDS,
    UPSTREAM_MAX_CONNECTIONS,
)
from gateway.core.scrub import Scrubber
from gateway.core.values import Profile, loads, problem
from gateway.upstreams.http_transport import lean_transport

__all__ = ["ModelUpstream"]

Json = dict[str, Any]

# What the agent reads when the upstream refuses the gateway's own credentials: the upstream's text is about
# the gateway's key (often quoting it), not the agent's business.
_REFUSED = {
    401: "the model upstream did not accept the gateway's key (401); the gateway's operator must check the "
         "model's api_key",
    403: "the model upstream refused the gateway's key access to this model (403); the gateway's operator must "
         "check the model's api_key and its permissions",
    407: "a proxy in front of the model upstream asked for credentials (407); the gateway's operator must "
         "check the proxy settings",
}


class ModelUpstream:
    """``url`` (base_url and the API's path) with the key's ``headers``; errors become ``ModelUpstreamError``."""

    def __init__(self, url: str, headers: dict[str, str], api_key: str | None, timeout: float) -> None:
        self.url = url
        self._headers = headers
        self._timeout = timeout
        self._scrub = Scrubber([api_key])
        self._client: httpx2.AsyncClient | None = None

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:  # made on first use, in the serving event loop
            limits = httpx2.Limits(max_connections=UPSTREAM_MAX_CONNECTIONS,
                                   keepalive_expiry=UPSTREAM_KEEPALIVE_SECONDS)
            # plain http:// (a local model server) on the lean wire (gateway/upstreams/http_transport.py);
            # https and proxies stay with httpx2's own transport
            self._client = httpx2.AsyncClient(follow_redirects=False, limits=limits, transport=lean_transport(limits))
        return self._client

    async def close(self) -> None:
        """Drop the connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def complete(self, body: Json, headers: dict[str, str] | None = None) -> Json:
        """One whole answer (``stream`` off); ``headers`` are the agent's passed on (the dialect's)."""
        try:
            # One deadline for the whole answer (httpx's timeout is per read), and a size read as it arrives.
            async with asyncio.timeout(self._timeout), self._http().stream(
                    "POST", self.url, json={**body, "stream": False}, headers={**self._headers, **(headers or {})},
                    timeout=self._timeout) as response:
                content = await _read(response)
        except TimeoutError as exc:
            raise self._too_slow() from exc
        except httpx2.HTTPError as exc:
            raise _unreachable(exc) from exc
        if response.status_code >= 400:
            raise self._error(response.status_code, _object_or_none(content))
        return self._event(content, "response")

    async def stream(self, body: Json, headers: dict[str, str] | None = None) -> AsyncIterator[Json]:
        """The events of one streamed answer, as they arrive: each ``data:`` line's JSON (``event:`` lines are
        skipped, the JSON names its type; ``[DONE]`` or the end of the body ends it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        http = self._http()
        request = http.build_request("POST", self.url, json={**body, "stream": True},
                                     headers={**self._headers, **(headers or {})},
                                     timeout=self._timeout)
        try:
            async with asyncio.timeout_at(deadline):
                response = await http.send(request, stream=True)
            try:
                if response.status_code >= 400:
                    async with asyncio.timeout_at(deadline):
                        content = await _read(response)
                    raise self._error(response.status_code, _object_or_none(content))
                async with contextlib.aclosing(_lines(response, deadline)) as lines:
                    async for line in lines:
                        if not line.startswith(b"data:"):
                            continue  # comments, event names, blank separators
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            return
                        yield self._event(data, "event")
            finally:
                await response.aclose()
        except TimeoutError as exc:
            raise self._too_slow() from exc
        except httpx2.HTTPError as exc:
            raise _unreachable(exc) from exc

    def _event(self, content: bytes, what: str) -> Json:
        """The upstream's answer (or one streamed event) as a JSON object, or the error it is or holds."""
        try:
            value = _object(self._scrub.secrets_in(content, shortest=MIN_SCRUBBED_ANSWER_SECRET_CHARS))
        except ValueError as exc:
            raise ModelUpstreamError(f"the model upstream sent a {what} that is not valid JSON: {exc}") from None
        if value.get("error") is not None:
            raise self._error(200, value)
        return value

    def _error(self, status: int, answer: Json | None) -> ModelUpstreamError:
        """An error answer: the upstream's 4xx is relayed (a context too long is the agent's to see), without
        credentials; a refusal of the gateway's key gets a fixed message."""
        relayed = status if 400 <= status < 500 and status not in _REFUSED else 502
        if status in _REFUSED:
            return ModelUpstreamError(_REFUSED[status], relayed)
        error = (answer or {}).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        text = f"the model upstream answered {status}"
        if isinstance(message, str) and message:
            text += ": " + self._scrub.text(message)[:MAX_MODEL_ERROR_CHARS]
        return ModelUpstreamError(text, relayed)

    def _too_slow(self) -> ModelUpstreamError:
        return ModelUpstreamError(f"the model upstream's answer took longer than the {self._timeout:g} s the "
                                  "gateway allows it (the model's timeout): it was cut off")


def _unreachable(exc: httpx2.HTTPError) -> ModelUpstreamError:
    return ModelUpstreamError(f"the model upstream failed: {type(exc).__name__}")


async def _read(response: httpx2.Response) -> bytes:
    """A whole (non-streamed) body, refused as soon as it grows past MAX_MODEL_RESPONSE_BYTES."""
    content = bytearray()
    async for piece in response.aiter_bytes():
        content += piece
        if len(content) > MAX_MODEL_RESPONSE_BYTES:
            raise ModelUpstreamError("the model upstream's response is too large")
    return bytes(content)


async def _lines(response: httpx2.Response, deadline: float) -> AsyncGenerator[bytes, None]:
    """A stream's lines as they arrive, by the stream's deadline and within MAX_MODEL_STREAM_BYTES.

    Linear in the bytes read: a piece without a line end is only appended, and a line is split off once.
    """
    pieces = response.aiter_bytes()
    pending = bytearray()
    total = 0
    while True:
        async with asyncio.timeout_at(deadline):  # around the read only: never across a yield
            piece = await anext(pieces, None)
        if piece is None:
            break
        total += len(piece)
        if total > MAX_MODEL_STREAM_BYTES:
            raise ModelUpstreamError(f"the model upstream's streamed answer grew past {MAX_MODEL_STREAM_BYTES} "
                                     "bytes: it was cut off")
        pending += piece
        if b"\n" not in piece:
            continue
        *complete, rest = pending.split(b"\n")
        pending = bytearray(rest)
        for line in complete:
            yield bytes(line.rstrip(b"\r"))
    if pending:
        yield bytes(pending.rstrip(b"\r"))


def _object(content: bytes) -> Json:
    """Strict JSON (gateway/core/values.py) that the gateway can send on as it is: a JSON object, no NaN or
    Infinity, no lone surrogate, not nested past the value limits; ``ValueError`` naming what is wrong."""
    value = loads(content)
    why = problem(value, Profile.JSON)
    if why is not None:
        raise ValueError(why)
    if not isinstance(value, dict):
        raise ValueError("it is not a JSON object")
    return value


def _object_or_none(content: bytes) -> Json | None:
    """An error body as a JSON object, if it is one (an HTML error page is not)."""
    try:
        return _object(content)
    except ValueError:
        return None
