"""One OpenAI-compatible model upstream: a chat completion, whole or as its stream of chunks (httpx2)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from gateway.errors import ModelUpstreamError
from gateway.limits import MAX_MODEL_RESPONSE_BYTES, UPSTREAM_KEEPALIVE_SECONDS, UPSTREAM_MAX_CONNECTIONS

__all__ = ["ModelUpstream"]

Json = dict[str, Any]


class ModelUpstream:
    """``{base_url}/chat/completions`` with the configured key; errors become ``ModelUpstreamError``."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._client: httpx2.AsyncClient | None = None

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:  # made on first use, in the serving event loop
            self._client = httpx2.AsyncClient(follow_redirects=False, limits=httpx2.Limits(
                max_connections=UPSTREAM_MAX_CONNECTIONS, keepalive_expiry=UPSTREAM_KEEPALIVE_SECONDS))
        return self._client

    async def close(self) -> None:
        """Drop the connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def complete(self, body: Json) -> Json:
        """One chat completion (``stream`` off)."""
        content = bytearray()
        try:
            # One deadline for the whole answer (httpx's timeout is per read), and a size read as it arrives.
            async with asyncio.timeout(self._timeout), self._http().stream(
                    "POST", self.url, json={**body, "stream": False}, headers=self._headers,
                    timeout=self._timeout) as response:
                async for piece in response.aiter_bytes():
                    content += piece
                    if len(content) > MAX_MODEL_RESPONSE_BYTES:
                        raise ModelUpstreamError("the model upstream's response is too large")
        except (httpx2.HTTPError, TimeoutError) as exc:
            raise ModelUpstreamError(f"the model upstream failed: {type(exc).__name__}") from exc
        answer = _json(bytes(content))
        _check(response.status_code, answer)
        if answer is None or not isinstance(answer.get("choices"), list) or not answer["choices"]:
            raise ModelUpstreamError("the model upstream's response is not a chat completion")
        return answer

    async def stream(self, body: Json) -> AsyncIterator[Json]:
        """The chunks of one streamed chat completion, as they arrive (``[DONE]`` ends it)."""
        try:
            async with self._http().stream("POST", self.url, json={**body, "stream": True}, headers=self._headers,
                                           timeout=self._timeout) as response:
                if response.status_code >= 400:
                    _check(response.status_code, _json(await response.aread()))
                async for line in response.aiter_lines():
                    if len(line) > MAX_MODEL_RESPONSE_BYTES:
                        raise ModelUpstreamError("an event from the model upstream is too large")
                    if not line.startswith("data:"):
                        continue  # comments, event names, blank separators
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    chunk = _json(data.encode())
                    if chunk is None:
                        raise ModelUpstreamError("the model upstream sent an event that is not a JSON object")
                    _check(200, chunk)
                    yield chunk
        except (httpx2.HTTPError, TimeoutError) as exc:
            raise ModelUpstreamError(f"the model upstream failed: {type(exc).__name__}") from exc


def _json(content: bytes) -> Json | None:
    try:
        value = json.loads(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _check(status: int, answer: Json | None) -> None:
    """Raise for an error answer: the upstream's 4xx is relayed (a context too long is the agent's to see)."""
    error = (answer or {}).get("error")
    if status < 400 and error is None:
        return
    message = error.get("message") if isinstance(error, dict) else None
    relayed = status if 400 <= status < 500 and status not in (401, 403, 407) else 502
    text = f"the model upstream answered {status}" + (f": {message}" if isinstance(message, str) else "")
    raise ModelUpstreamError(text, relayed)
