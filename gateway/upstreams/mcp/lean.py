"""A lean ``tools/call`` to a streamable-HTTP MCP upstream: one POST on the upstream's pooled keep-alive client.

The SDK's client sends each request through memory streams and a task group per POST, and closes an event
stream as soon as its result is in. For a call whose caller can be told nothing but the result
(``LeanCalls.takes``: no progress asked, no log level, nothing the upstream could ask that its client
declared, not a tool with task support) this module POSTs the ``tools/call`` itself, on the same ``httpx2``
client (its size cap, its pool) and in the session the SDK's client holds: the era it negotiated, with the
headers and ``_meta`` its session stamps on every request (at 2026-07-28: the protocol version, client info
and capabilities, ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``; in the handshake era: the session id and
negotiated version). It reads the whole response — a JSON body, or the event stream to its result and then
its rest (``keepalive.DrainOnClose``) — so the connection goes back to the pool.

What the SDK's client would do with anything else is done by the SDK's own code: a request the upstream
sends on the call's stream is answered by the session's request handler (the gateway's callbacks, which
refuse it for such a caller) and POSTed back; a notification goes to its notification handler; the result
is checked as ``ClientSession.call_tool`` checks it (the negotiated version's result schema, the tool's
output schema); an ``InputRequiredResult`` or an extension's result shape is finished as ``Client.call_tool``
finishes it. Failures are the SDK's: the same JSON-RPC error codes and messages for HTTP errors, unparseable
bodies and broken streams. A call the upstream did not run (a redirect, or at 2026-07-28 a header mismatch,
which the SDK's client answers by listing the tools again) is handed back (``None``) for the SDK's path.

To be the SDK's behaviour and not a copy of it, this module calls into the SDK client's session (its envelope,
its handlers, its ``tools/call`` parsing, ``validate_tool_result``) and client (its input-required driver, its
extensions' claims). What of that is private to the SDK is reached through ``_sdk.py`` only, read once per
connection; tests/upstreams/mcp/test_sdk.py pins it, and tests/upstreams/mcp/test_lean_upstream.py runs the same calls
both ways.

Stateless 2026-07-28 calls on a handshake-era session are not made, though a server may offer both: a tool
that announces a tool-list change during a stateless call announces it only on ``subscriptions/listen``
streams, which the gateway does not keep on a handshake session, so the change would go unheard (and a
server's per-session state would not apply). An upstream is spoken to at 2026-07-28 with ``mcp.protocol:
newest`` (or when it speaks nothing else), and then the lean path speaks 2026-07-28 too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ResultClaim
from mcp.client.streamable_http import DEFAULT_RECONNECTION_DELAY_MS, MAX_RECONNECTION_ATTEMPTS
from mcp_types import methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import ValidationError

from gateway.upstreams.client_requests import ClientRequestRouter
from gateway.upstreams.keepalive import DrainOnClose
from gateway.upstreams.mcp._sdk import (
    answer_request,
    clamp_inbound_ttl,
    deliver_notification,
    drive_input_required,
    inject_trace_context,
    later_revision_fields,
    otel_span,
    session_hooks,
)

__all__ = ["LeanCalls", "SessionSeen"]

_METHOD = "tools/call"
_SESSION_HEADER = "mcp-session-id"
_DRAIN = "gateway.drain_on_close"  # response extension: the stream to close without draining when a call is given up
_BASE_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class SessionSeen(httpx2.AsyncBaseTransport):
    """The upstream's transport, noting for lean calls the session id the SDK's client sends (handshake era),
    and which response stream drains on close (``_DRAIN``: the client wraps the stream itself)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner
        self.session_id: str | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session_id = request.headers.get(_SESSION_HEADER)
        if session_id:
            self.session_id = session_id
        response = await self._inner.handle_async_request(request)
        if isinstance(response.stream, DrainOnClose):
            response.extensions[_DRAIN] = response.stream
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(slots=True)
class _Stream:
    """Where a call's event stream got to: what resuming it needs."""

    last_event_id: str | None = None
    retry_ms: int | None = None
    sse: bool = True  # whether the latest response was an event stream


class LeanCalls:
    """One connection's lean ``tools/call`` path (made with the SDK client it shares the session of)."""

    def __init__(self, url: str, http: httpx2.AsyncClient, client: Client, seen: SessionSeen,
                 router: ClientRequestRouter, max_event_size: int) -> None:
        self.client = client
        self._hooks = session_hooks(client.session)  # the SDK session's private hooks, read once (_sdk.py)
        self._claims = claims_by_model(client)
        self._url = httpx2.URL(url)  # parsed once: httpx2 parses a str on every request
        self._http = http
        self._seen = seen
        self._router = router
        self._max_event_size = max_event_size
        self._ids = itertools.count(1)
        self._background: set[asyncio.Task[None]] = set()

    def takes(self, execution: Mapping[str, Any] | None) -> bool:
        """Whether a call (to a tool with this ``execution``) may take the lean path: its caller can be sent
        nothing but the result, and the tool cannot answer with a task."""
        if execution is not None and execution.get("taskSupport") in ("optional", "required"):
            return False
        return self.client.protocol_version is not None and self._router.quiet()

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult | None:
        """The tool's result, as ``Client.call_tool`` gives it; None when the upstream did not run the call
        (for the SDK's path). Raises what the SDK's path raises."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        data: dict[str, Any] = {"method": _METHOD, "params": params}
        opts: dict[str, Any] = {}
        self._hooks.stamp(data, cast(Any, opts))  # the SDK's own per-request headers and _meta for this era
        request_id = f"gateway-{next(self._ids)}"
        headers = self._headers(opts.get("headers"))
        # The SDK's dispatcher sends each request in a client span and carries the trace context in _meta.
        with otel_span(f"MCP send {_METHOD} {tool}", kind=SpanKind.CLIENT,
                       attributes={"mcp.method.name": _METHOD, "jsonrpc.request.id": request_id}) as span:
            meta = dict(params.get("_meta") or {})
            inject_trace_context(meta)
            if meta:
                params["_meta"] = meta
            body = _encode({"jsonrpc": "2.0", "id": request_id, **data})
            try:
                raw = await self._post(body, headers, request_id)
            except MCPError as exc:
                span.set_attributes({"error.type": str(exc.code), "rpc.response.status_code": str(exc.code)})
                span.set_status(StatusCode.ERROR, exc.message)
                raise
            except asyncio.CancelledError:
                if not self._modern():  # the SDK's courtesy cancel in the handshake era (2026: the closed POST)
                    self._spawn(self._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                            "params": {"requestId": request_id, "reason": "caller cancelled"}}))
                raise
        if raw is None:
            return None
        return await self._finish(tool, arguments, raw)

    def _modern(self) -> bool:
        return self.client.protocol_version in MODERN_PROTOCOL_VERSIONS

    def _headers(self, stamped: Mapping[str, str] | None) -> dict[str, str]:
        headers = dict(_BASE_HEADERS)
        if self._seen.session_id and not self._modern():
            headers[_SESSION_HEADER] = self._seen.session_id
        if stamped:
            headers.update(stamped)
        return headers

    async def _post(self, body: bytes, headers: dict[str, str], request_id: str) -> dict[str, Any] | None:
        """The JSON-RPC result of the call (None: not run), or the SDK's ``MCPError`` for what came instead."""
        request = self._http.build_request("POST", self._url, content=body, headers=headers)
        response = await self._http.send(request, stream=True)
        try:
            return await self._read(response, request_id)
        except asyncio.CancelledError:
            drain = response.extensions.get(_DRAIN)
            if isinstance(drain, DrainOnClose):
                await drain.abort()  # given up: closed now, not drained (the SDK's client returns at once)
            raise
        finally:
            await response.aclose()  # read to its end by now, or drained (DrainOnClose): the connection is kept

    async def _read(self, response: httpx2.Response, request_id: str) -> dict[str, Any] | None:
        status = response.status_code
        if status == 202:
            raise MCPError(types.INVALID_REQUEST, "server answered a request with 202 Accepted")
        if 300 <= status < 400:
            return None  # not run: the SDK's path follows a redirect within the origin, or explains it
        content_type = response.headers.get("content-type", "").lower()
        if status >= 400:
            if content_type.startswith("application/json"):
                try:
                    parsed = types.jsonrpc_message_adapter.validate_json(await response.aread(), by_name=False)
                except (httpx2.StreamError, ValidationError):
                    parsed = None
                if isinstance(parsed, types.JSONRPCError):
                    if parsed.error.code == types.HEADER_MISMATCH and self._modern():
                        return None  # not run; the SDK's path lists the tools again and resends
                    raise MCPError.from_error_data(parsed.error)
            if status == 404:
                if self._seen.session_id is None or self._modern():
                    raise MCPError(types.METHOD_NOT_FOUND, "Not Found")
                raise MCPError(types.INVALID_REQUEST, "Session terminated")
            raise MCPError(types.INTERNAL_ERROR, "Server returned an error response")
        if content_type.startswith("application/json"):
            try:
                message = types.jsonrpc_message_adapter.validate_json(await response.aread(), by_name=False)
            except (httpx2.StreamError, ValidationError) as exc:
                raise MCPError(types.PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None
            return _outcome(message)
        if content_type.startswith("text/event-stream"):
            return await self._events(response)
        raise MCPError(types.INVALID_REQUEST, f"Unexpected content type: {content_type}")

    async def _events(self, response: httpx2.Response) -> dict[str, Any]:
        """Read the call's event stream up to its result, doing with everything before it what the SDK does,
        and resuming a stream that ended early with a GET from its last event, as the SDK's client does."""
        stream = _Stream()
        outcome = await self._read_events(response, stream)
        attempt = 0
        while outcome is None:
            if stream.last_event_id is None:  # not resumable
                raise MCPError(types.CONNECTION_CLOSED, "SSE stream ended without a response")
            if attempt >= MAX_RECONNECTION_ATTEMPTS:
                raise MCPError(types.CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted")
            delay = stream.retry_ms if stream.retry_ms is not None else DEFAULT_RECONNECTION_DELAY_MS
            await asyncio.sleep(delay / 1000)
            headers = {**self._session_headers(), "last-event-id": stream.last_event_id}
            try:
                async with self._http.stream("GET", self._url, headers=headers) as resumed:
                    resumed.raise_for_status()
                    stream.sse = resumed.headers.get("content-type", "").partition(";")[0].strip().lower() \
                        == "text/event-stream"
                    outcome = await self._read_events(resumed, stream)
                    attempt = 0  # ended again: resume again
            except MCPError as exc:
                if exc.code != types.CONNECTION_CLOSED or stream.sse:
                    raise
                attempt += 1  # not an event stream: try again
            except Exception:
                attempt += 1
        return outcome

    async def _read_events(self, response: httpx2.Response, stream: _Stream) -> dict[str, Any] | None:
        """The call's result from this event stream, or None when it ended without one."""
        try:
            async for event in httpx2.EventSource(response, max_event_size=self._max_event_size):
                if event.id:
                    stream.last_event_id = event.id
                if event.retry is not None:
                    stream.retry_ms = event.retry
                if event.event != "message" or not event.data:
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(event.data, by_name=False)
                except Exception as exc:
                    raise MCPError(types.PARSE_ERROR, f"Failed to parse SSE message: {exc}") from None
                if isinstance(message, types.JSONRPCRequest):
                    await self._answer(message)
                elif isinstance(message, types.JSONRPCNotification):
                    await deliver_notification(self._hooks, message.method, message.params)
                else:
                    return _outcome(message)
        except httpx2.SSEError as exc:
            raise MCPError(types.CONNECTION_CLOSED, f"SSE stream failed: {exc}") from None
        except MCPError:
            raise
        except Exception:  # the SDK's client treats a broken stream as one that ended
            pass
        return None

    async def _answer(self, request: types.JSONRPCRequest) -> None:
        """Answer the upstream's request (sampling, elicitation, roots, ping) through the SDK session's handler."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request.id}
        try:
            reply["result"] = await answer_request(self._hooks, request.id, request.method, request.params)
        except MCPError as exc:
            reply["error"] = exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)
        except Exception as exc:
            reply["error"] = {"code": types.INTERNAL_ERROR, "message": str(exc)}
        await self._send(reply)

    def _session_headers(self) -> dict[str, str]:
        """What the SDK's transport sends with a message its session does not stamp (a response, a GET)."""
        headers = self._headers(None)
        version = self.client.protocol_version
        if version is not None:
            headers["mcp-protocol-version"] = version
        return headers

    async def _send(self, message: dict[str, Any]) -> None:
        """POST a response or notification in the session (the server answers 202; nothing to read)."""
        headers = self._session_headers()
        try:
            response = await self._http.post(self._url, content=_dumps(message), headers=headers)
            await response.aclose()
        except Exception:  # the connection or the client is gone: as the SDK's client, the answer is lost
            pass  # (the request it answered fails on the server's side)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _finish(self, tool: str, arguments: dict[str, Any], raw: dict[str, Any]) -> types.CallToolResult:
        """``raw`` checked and typed as ``ClientSession.call_tool`` does, and finished as ``Client.call_tool``."""
        session = self.client.session
        clamp_inbound_ttl(raw)
        version = self.client.protocol_version or "2025-11-25"
        try:
            methods.validate_server_result(_METHOD, version, raw)
        except KeyError:
            pass
        if not (foreign := later_revision_fields(_METHOD, version)).isdisjoint(raw):
            raw = {key: value for key, value in raw.items() if key not in foreign}
        result = self._hooks.call_tool_adapter.validate_python(raw, by_name=False)
        if isinstance(result, types.CallToolResult):
            if not result.is_error:
                await session.validate_tool_result(tool, result)
            return result

        async def retry(responses: types.InputResponses | None, state: str | None) -> Any:
            return await session.call_tool(tool, arguments, input_responses=responses, request_state=state,
                                           allow_input_required=True, allow_claimed=True)

        final = await drive_input_required(self.client, result, retry)
        if isinstance(final, types.CallToolResult):
            return final
        claim = self._claims[type(final)]  # only claimed shapes reach here, as in Client.call_tool
        done: types.CallToolResult = await claim.resolve(
            final, ClaimContext(session=session, tool_name=tool, read_timeout_seconds=None))
        if not done.is_error:
            await session.validate_tool_result(tool, done)
        return done


def claims_by_model(client: Client) -> dict[type[types.Result], ResultClaim[Any]]:
    """The client's extensions' result claims by the model each parses into (how ``Client.call_tool`` finds the
    claim that finishes a claimed result)."""
    return {claim.model: claim for extension in client.extensions or () for claim in extension.claims()}


def _encode(message: dict[str, Any]) -> bytes:
    """The request's body as the SDK's transport writes it (its JSON settings; NaN and infinities as null)."""
    try:
        return _dumps(message)
    except ValueError:  # a non-finite number: the SDK's pydantic dump makes it null first
        return _dumps(types.JSONRPCRequest.model_validate(message).model_dump(by_alias=True, mode="json",
                                                                               exclude_unset=True))


def _dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _outcome(message: Any) -> dict[str, Any]:
    """The result of a JSON-RPC response; the error of an error response raised as the SDK raises it."""
    if isinstance(message, types.JSONRPCError):
        raise MCPError.from_error_data(message.error)
    if isinstance(message, types.JSONRPCResponse):
        return dict(message.result)
    raise MCPError(types.INTERNAL_ERROR, "the upstream sent no response to the call")
