"""The model proxy's endpoints: ``POST /v1`` + each model API's path (``/v1/chat/completions``, ``/v1/responses``,
``/v1/messages``), whole or streamed (SSE), every error in that API's own error format.

Authenticated like every other endpoint (``RequireIdentity``: Bearer, or ``x-api-key`` as the anthropic
client sends it); the run is named as everywhere else (``X-Gateway-Session``, else the implicit run of the
principal, its User-Agent and how the conversation began: docs/runs.md). The work is gateway/models/proxy.py's
and the API's dialect's; this module reads the request and writes the response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.core.errors import AuditWriteError, ModelUpstreamError
from gateway.core.values import id_problem, shown_id
from gateway.frontends.identity import RefusalBodies, gateway_body, identity_of
from gateway.frontends.rest import json_object_or_problem
from gateway.models.dialects.base import Dialect
from gateway.models.dialects.registry import available, dialect
from gateway.models.proxy import Caller, ModelProxy, RequestProblem, UnknownModel, WrongApi
from gateway.pipeline.runs import client_of, conversation_of, explicit_run_id
from gateway.policy.call import Principal

__all__ = ["model_refusal_bodies", "model_routes"]

Failed = Callable[[int, str, str], JSONResponse]  # an error in the endpoint's API format


def model_routes(proxy: ModelProxy) -> list[Route]:
    """One route per model API this build speaks (they expect ``RequireIdentity`` in front)."""
    return [Route(f"/v1{d.path}", _endpoint(proxy, d), methods=["POST"]) for d in map(dialect, available())]


def model_refusal_bodies(fallback: RefusalBodies = gateway_body) -> RefusalBodies:
    """Refusals before routing (no key, a bad key, over the key's share) in each model API's own error format on
    its path, so the API's SDK raises its usual error with the gateway's message; ``fallback`` elsewhere."""
    apis = {f"/v1{d.path}": d for d in map(dialect, available())}

    def body(path: str, status: int, code: str, message: str) -> bytes:
        api = apis.get(path)
        if api is None:
            return fallback(path, status, code, message)
        return json.dumps(api.error_body(status, code, message)).encode()
    return body


def _endpoint(proxy: ModelProxy, api: Dialect) -> Callable[[Request], Awaitable[Response]]:
    def failed(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse(api.error_body(status, code, message), status_code=status)

    async def serve(request: Request) -> Response:
        identity = identity_of(request.scope)
        body = await json_object_or_problem(request)
        if isinstance(body, str):
            return failed(400, "invalid-json", f"{body[0].upper()}{body[1:]}.")
        explicit = explicit_run_id(request.headers)
        why = None if explicit is None else id_problem("run id", explicit)
        if explicit is not None and why is not None:  # refused at the door: no run read or made, no model asked
            return _refused_run(proxy, identity.principal, explicit, why, failed)
        opening = conversation_of(api.conversation_key(body))
        run = await proxy.gateway.resolve_run(identity.principal.key, explicit,
                                              client_of(None, request.headers, opening))
        caller = Caller(identity.principal, run, identity.token)
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            if body.get("stream") is True:
                events = proxy.stream(api, body, caller, headers)
                first = await anext(events)  # an upstream that fails at once still gets a proper status
                return StreamingResponse(_continue(first, events), media_type="text/event-stream",
                                         headers={"cache-control": "no-cache"})
            return JSONResponse(await proxy.complete(api, body, caller, headers))
        except RequestProblem as exc:
            return failed(400, "invalid-request", str(exc))
        except UnknownModel as exc:
            return failed(404, "unknown-model", f"No model named {exc.args[0]!r} is served here.")
        except WrongApi as exc:
            return failed(400, "wrong-api", f"The model entry {exc.entry!r} speaks the {exc.api} API: send its "
                                            f"requests to /v1{dialect(exc.api).path}, not /v1{api.path}.")
        except ModelUpstreamError as exc:
            return failed(exc.status, exc.code, str(exc))

    return serve


def _refused_run(proxy: ModelProxy, principal: Principal, run_id: str, why: str, failed: Failed) -> JSONResponse:
    """A 400 for a run id the gateway does not take, written to the audit log first (a 503 if it cannot be)."""
    try:
        proxy.gateway.record("request.refused", frontend="model", principal=principal.to_record(),
                             session=shown_id(run_id), verdict="invalid_input", reason=why)
    except AuditWriteError:
        return failed(503, "audit-failed", "The request could not be recorded, so it was refused.")
    return failed(400, "invalid-input", f"The request was refused: {why}.")


async def _continue(first: bytes, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream after its first event (the proxy ends one whose upstream fails midway with an error event)."""
    yield first
    async for event in events:
        yield event
