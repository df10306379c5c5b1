"""The REST frontend: list tools, invoke one, and see the gateway's health and policies.

    GET  /v1/tools
    POST /v1/tools/{name}/invoke   {arguments, call_id?, session_id?, iteration?}  ?wait=30s for approvals:
                                   200 with the result, or 202 {approval_id, status_url} while
                                   the approval is open (invoke again with the same call_id)
    GET  /v1/policies
    GET  /healthz                   (no authentication)
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.core.durations import seconds as duration_seconds
from gateway.core.errors import UnknownToolError
from gateway.core.limits import MAX_REST_WAIT_SECONDS
from gateway.core.values import loads
from gateway.frontends.identity import identity_of
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.request import call_id_of, gave_call_id, iteration_of
from gateway.pipeline.runs import client_of, explicit_run_id

__all__ = ["error_response", "json_object_or_problem", "read_json_object", "rest_routes"]


log = logging.getLogger("gateway.frontends.rest")


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """The one error body shape of the REST API."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


# Outcomes that answer with an HTTP error status rather than 200 (the body is the outcome still).
_STATUS = {"invalid_input": (400, "invalid-input"), "rate_limited": (429, "rate-limited")}


async def json_object_or_problem(request: Request) -> dict[str, Any] | str:
    """The request body as a JSON object, or why it is not one."""
    try:
        body = loads(await request.body())
    except ValueError as exc:
        return f"the request body must be a JSON object: {exc}"
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    return body


async def read_json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request body as a JSON object, or a 400 response saying what is wrong."""
    body = await json_object_or_problem(request)
    return error_response(400, "invalid-json", f"{body[0].upper()}{body[1:]}.") if isinstance(body, str) else body


def rest_routes(gateway: Gateway) -> list[Route]:
    """Routes for the tool API (they expect ``RequireIdentity`` in front)."""

    async def list_tools(request: Request) -> JSONResponse:
        identity = identity_of(request.scope)
        tools = [{"name": t.name, "title": t.spec.title, "description": t.spec.description,
                  "input_schema": t.spec.input_schema, "annotations": t.spec.annotations,
                  "output_schema": t.spec.output_schema, "upstream": t.upstream.name}
                 for t in gateway.usable_tools(identity.principal, None)]  # a REST caller cannot be asked
        return JSONResponse({"tools": tools})

    async def invoke(request: Request) -> JSONResponse:
        identity = identity_of(request.scope)
        # A body that cannot be read is still a call: the gateway refuses it, and audits it.
        body = await json_object_or_problem(request)
        refused, body = (body, {}) if isinstance(body, str) else (None, body)
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict):
            refused, arguments = "'arguments' must be a JSON object", {}
        run = await gateway.resolve_run(identity.principal.key,
                                        explicit_run_id(request.headers, body_session_id=body.get("session_id")),
                                        client_of(None, request.headers))
        try:
            wait = _wait_seconds(request.query_params.get("wait"))
        except ValueError as exc:
            return error_response(400, "invalid-wait", str(exc))
        call = CallRequest(
            tool=request.path_params["name"], arguments=arguments, principal=identity.principal,
            session_id=run.id, run_client=run.client, call_id=call_id_of(body.get("call_id")),
            call_id_given=gave_call_id(body.get("call_id")),
            iteration=iteration_of(body.get("iteration")), frontend="rest", wait_seconds=wait,
            refused=refused, traceparent=request.headers.get("traceparent"), caller_token=identity.token,
        )
        try:
            outcome = await gateway.call(call)
        except UnknownToolError as exc:
            return error_response(404, "unknown-tool", str(exc))
        except Exception:
            log.exception("call %s to %s failed inside the gateway", call.call_id, call.tool)
            return error_response(500, "internal", "The gateway failed.")
        if outcome.pending_approval is not None:
            approval_id = outcome.pending_approval
            return JSONResponse({
                "call_id": outcome.call_id, "decision": "pending", "approval_id": approval_id,
                "status_url": f"/v1/approvals/{approval_id}", "message": outcome.text,
            }, status_code=202)
        status = _STATUS.get(outcome.decision)
        if status is None:
            return JSONResponse(outcome.to_rest())
        retry_after = outcome.meta.get("gateway/retry_after")
        return JSONResponse({"error": {"code": status[1], "message": outcome.text}, **outcome.to_rest()},
                            status_code=status[0],
                            headers={"Retry-After": str(retry_after)} if retry_after is not None else None)

    async def policies(request: Request) -> JSONResponse:
        return JSONResponse(gateway.policy_status())

    return [
        Route("/v1/tools", list_tools, methods=["GET"]),
        Route("/v1/tools/{name}/invoke", invoke, methods=["POST"]),
        Route("/v1/policies", policies, methods=["GET"]),
    ]


def _wait_seconds(value: str | None) -> float:
    """``?wait=30s`` (or ``30``): how long to hold the request for an approval; 0 when absent."""
    if value is None:
        return 0.0
    seconds = duration_seconds(value)
    if not 0 <= seconds <= MAX_REST_WAIT_SECONDS:
        raise ValueError(f"wait must be between 0 and {MAX_REST_WAIT_SECONDS:.0f} seconds")
    return seconds

