"""One MCP tools/call, whichever strategy answers it: the pipeline's ``CallRequest``, and the MCP result of its outcome.

The SDK's handler (``frontend.py``), the lean path (``lean.py``) and tasks (``tasks.py``) all build the
request and shape the answer here, so the three answer alike. A tool's failure or refusal is a result with
``isError`` that the model reads; a tool that is not exposed is a protocol error (-32602) naming only the
requested name. Unexpected failures become an ``isError`` result, never a crash or a leak.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Mapping
from typing import Any

import jsonschema
import mcp_types as types
from mcp import MCPError
from starlette.types import Scope

from gateway.core.errors import UnknownToolError
from gateway.frontends.identity import identity_of
from gateway.frontends.mcp.round_trips import InputRequired
from gateway.observe.tracing import client_traceparent
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.request import CallOutcome, Progress, call_id_of, gave_call_id, iteration_of
from gateway.pipeline.runs import CLIENT_INFO_META, MCP_SESSION_HEADER, client_of, explicit_run_id
from gateway.upstreams.base import ToolProgress
from gateway.upstreams.client_requests import ClientChannel

__all__ = ["CALL_ID_META", "ITERATION_META", "ToolCalls", "client_info_of"]

log = logging.getLogger("gateway.frontends.mcp")

# A client may name its call in the request's `_meta` so a retry is recognised as the same call.
CALL_ID_META = "gateway/call_id"
ITERATION_META = "gateway/iteration"


class ToolCalls:
    """The gateway's side of an MCP tools/call: its request, its run, its answer."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def build(self, scope: Scope, headers: Mapping[str, str], params: types.CallToolRequestParams,
                    meta: dict[str, Any], *, client_params: types.InitializeRequestParams | None,
                    client: ClientChannel | None, progress: Progress | None = None,
                    upstream_progress: ToolProgress | None = None, elicit: Any = None) -> CallRequest:
        """The pipeline's request for a tools/call."""
        identity = identity_of(scope)
        run = await self.gateway.resolve_run(identity.principal.key, explicit_run_id(headers, meta),
                                             client_of(client_info_of(client_params, meta), headers),
                                             headers.get(MCP_SESSION_HEADER) or None)
        return CallRequest(
            tool=params.name,
            arguments=dict(params.arguments or {}),
            principal=identity.principal,
            session_id=run.id,
            run_client=run.client,
            call_id=call_id_of(meta.get(CALL_ID_META)),
            call_id_given=gave_call_id(meta.get(CALL_ID_META)),
            iteration=iteration_of(meta.get(ITERATION_META)),
            progress=progress,
            upstream_progress=upstream_progress,
            frontend="mcp",
            elicit=elicit,
            client=client,
            traceparent=client_traceparent(meta.get("traceparent"), headers.get("traceparent")),
            caller_token=identity.token,
        )

    async def answer(self, request: CallRequest,
                     running: Awaitable[CallOutcome]) -> types.CallToolResult | types.InputRequiredResult:
        """The MCP result of a running call; a protocol error (``MCPError``) is raised for the client."""
        try:
            outcome = await running
        except InputRequired as asked:
            return asked.result
        except MCPError:  # a protocol error for the client (an invalid requestState)
            raise
        except UnknownToolError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except Exception:
            log.exception("call %s to %s failed inside the gateway", request.call_id, request.tool)
            return types.CallToolResult(content=[types.TextContent(type="text", text="The gateway failed.")],
                                        is_error=True)
        return self.tool_result(request.tool, outcome)

    def tool_result(self, name: str, outcome: CallOutcome) -> types.CallToolResult:
        """The MCP result of a call's outcome."""
        structured = outcome.structured if isinstance(outcome.structured, dict) else None
        is_error = outcome.is_error
        exposed = self.gateway.tool(name)
        schema = exposed.spec.output_schema if exposed is not None else None
        if not is_error and schema is not None and not _fits(schema, structured):
            # MCP requires a non-error result of a tool with an outputSchema to carry conforming structured
            # content (the SDK client raises otherwise). A result the gateway made (skip, pending) or rewrote
            # that does not fit goes as an error result with the same text, which clients do not validate.
            log.info("call %s: the result does not fit %s's outputSchema; sent as isError", outcome.call_id, name)
            structured, is_error = None, True
        return types.CallToolResult.model_validate({
            "content": outcome.content, "structuredContent": structured, "isError": is_error,
            "_meta": outcome.meta,
        })


def client_info_of(client_params: types.InitializeRequestParams | None, meta: dict[str, Any]) -> Any:
    """The client's clientInfo: from the MCP session's initialize, or this request's 2026-07-28 ``_meta``."""
    if client_params is not None:
        return client_params.client_info
    return meta.get(CLIENT_INFO_META)


@functools.lru_cache(maxsize=256)
def _output_validator(schema: str) -> Any:
    parsed = json.loads(schema)
    cls = jsonschema.validators.validator_for(parsed)
    cls.check_schema(parsed)
    return cls(parsed)


def _fits(schema: dict[str, Any], structured: Any) -> bool:
    """Whether ``structured`` is content a client validating against ``schema`` accepts."""
    if structured is None:
        return False
    try:
        validator = _output_validator(json.dumps(schema, sort_keys=True))
    except (jsonschema.SchemaError, TypeError, ValueError):  # an invalid schema: nothing can fit; relay as is
        return True
    return bool(validator.is_valid(structured))
