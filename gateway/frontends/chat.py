"""The model proxy's endpoint: ``POST /v1/chat/completions``, OpenAI-compatible, plain or streamed (SSE).

Authenticated like every other endpoint (``RequireIdentity``); the run is named as everywhere else
(``X-Gateway-Session``, else the implicit run of the principal, its User-Agent and how the conversation
began: docs/runs.md). The work is gateway/models/proxy.py's; this module reads the request and writes the
response.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.core.errors import AuditWriteError, ModelUpstreamError
from gateway.core.values import id_problem, shown_id
from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response, read_json_object
from gateway.models.proxy import Caller, ModelProxy, RequestProblem, UnknownModel
from gateway.pipeline.runs import client_of, conversation_of, explicit_run_id
from gateway.policy.call import Principal

__all__ = ["chat_routes"]

log = logging.getLogger("gateway.frontends.chat")


def _upstream_failed(exc: ModelUpstreamError) -> JSONResponse:
    return error_response(exc.status, exc.code, str(exc))


def chat_routes(proxy: ModelProxy) -> list[Route]:
    """The chat-completions route (it expects ``RequireIdentity`` in front)."""

    async def completions(request: Request) -> Response:
        identity = identity_of(request.scope)
        body = await read_json_object(request)
        if isinstance(body, JSONResponse):
            return body
        explicit = explicit_run_id(request.headers)
        why = None if explicit is None else id_problem("run id", explicit)
        if explicit is not None and why is not None:  # refused at the door: no run read or made, no model asked
            return _refused_run(proxy, identity.principal, explicit, why)
        run = await proxy.gateway.resolve_run(identity.principal.key, explicit,
                                              client_of(None, request.headers, conversation_of(body.get("messages"))))
        caller = Caller(identity.principal, run, identity.token)
        try:
            if body.get("stream") is True:
                events = proxy.stream(body, caller)
                first = await anext(events)  # an upstream that fails at once still gets a proper status
                return StreamingResponse(_continue(first, events), media_type="text/event-stream",
                                         headers={"cache-control": "no-cache"})
            return JSONResponse(await proxy.complete(body, caller))
        except RequestProblem as exc:
            return error_response(400, "invalid-request", str(exc))
        except UnknownModel as exc:
            return error_response(404, "unknown-model", f"No model named {exc.args[0]!r} is served here.")
        except ModelUpstreamError as exc:
            return _upstream_failed(exc)

    return [Route("/v1/chat/completions", completions, methods=["POST"])]


def _refused_run(proxy: ModelProxy, principal: Principal, run_id: str, why: str) -> JSONResponse:
    """A 400 for a run id the gateway does not take, written to the audit log first (a 503 if it cannot be)."""
    try:
        proxy.gateway.record("request.refused", frontend="model", principal=principal.to_record(),
                             session=shown_id(run_id), verdict="invalid_input", reason=why)
    except AuditWriteError:
        return error_response(503, "audit-failed", "The request could not be recorded, so it was refused.")
    return error_response(400, "invalid-input", f"The request was refused: {why}.")


async def _continue(first: bytes, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream after its first event; a model upstream that fails midway ends it with an error event."""
    yield first
    try:
        async for event in events:
            yield event
    except ModelUpstreamError as exc:
        log.warning("a streamed chat completion ended early: %s", exc)
        yield f"data: {json.dumps({'error': {'code': exc.code, 'message': str(exc)}})}\n\n".encode()
