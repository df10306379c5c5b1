"""The OpenAPI 3.1 description of the gateway's own REST API, served at ``GET /openapi.json``.

    GET /openapi.json   (no authentication, like /healthz and /readyz)

It describes this gateway's API (the tool API, the approver API, /healthz and /readyz), not the tools behind
it: every gateway serves the same document, so it holds no secret, no tool name and no policy, and
it is served without a key so clients and fuzzers (schemathesis in tests/fuzz) can read it before
they have one. Tool names and their input schemas stay behind authentication at ``GET /v1/tools``.

Not described here (``UNDESCRIBED_PATHS``, each with its reason): ``/mcp`` (JSON-RPC over streamable HTTP,
specified by MCP itself), the approvals page (HTML) and its single sign-on (browser redirects and the page's
cookie session), and the RFC 9728 protected resource metadata (its shape is that RFC's).
tests/frontends/test_openapi_doc.py compares this document with the routes of an app with every part
configured, so a REST route added without a description here fails the suite.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway import __version__
from gateway.approvals.model import ApprovalState
from gateway.core.limits import MAX_APPROVALS_PAGE, MAX_REST_WAIT_SECONDS, MAX_SESSIONS_PAGE
from gateway.frontends.openapi_console import console_operations, console_schemas

__all__ = ["OPENAPI_PATH", "UNDESCRIBED_PATHS", "openapi_document", "openapi_routes"]

OPENAPI_PATH = "/openapi.json"

# Routes of the app that are not REST and so not in this document, with the reason (some are served only when
# their part is configured: tests/frontends/test_openapi_doc.py builds an app with every part).
UNDESCRIBED_PATHS = {
    "/mcp": "MCP's JSON-RPC over streamable HTTP, described by the MCP specification",
    "/approvals": "the approvals page (HTML for people)",
    "/approvals/{approval_id}": "the approvals page (HTML for people)",
    "/console": "the operator console (HTML for people; it reads the admin API)",
    # Single sign-on (`approvals.sso`): the browser's side of the authorization code flow and the page's
    # cookie session, for people at the approvals page; scripts decide approvals with a key on /v1/approvals.
    "/approvals/sso/login": "the approvals page's sign-in: a browser redirect to the identity provider",
    "/approvals/sso/callback": "the approvals page's sign-in: the identity provider's redirect back to it",
    "/approvals/sso/session": "the approvals page's own view of its cookie session (not an API for clients)",
    "/approvals/sso/logout": "the approvals page's sign-out of its cookie session (not an API for clients)",
    # `auth.resource_metadata`: a document whose shape RFC 9728 defines, for OAuth clients to discover.
    "/.well-known/oauth-protected-resource": "RFC 9728 protected resource metadata, described by that RFC",
    "/.well-known/oauth-protected-resource/mcp": "RFC 9728 protected resource metadata for /mcp, described by that"
                                                 " RFC",
    OPENAPI_PATH: "this document itself",
}

Json = dict[str, Any]

_JSON = "application/json"


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(schema: Json, description: str) -> Json:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error(description: str) -> Json:
    return {"$ref": f"#/components/responses/{description}"}


# Errors any protected operation can answer before its handler runs: a malformed or refused
# request at the edge (bad key, origin, size, rate). Each has the one error body shape.
_EDGE_ERRORS = {"400": _error("BadRequest"), "401": _error("Unauthorized"), "403": _error("Forbidden"),
                "413": _error("TooLarge"), "429": _error("TooManyRequests")}
# Operations that read a JSON body also refuse any other content type (CSRF defence).
_BODY_ERRORS = {**_EDGE_ERRORS, "415": _error("UnsupportedMediaType")}

_ID_PATTERN = "^[^/]+$"


def _schemas() -> Json:
    any_object: Json = {"type": "object"}
    strings: Json = {"type": "array", "items": {"type": "string"}}
    requirement = {"type": "object", "required": ["rule", "message", "approvers"], "properties": {
        "rule": {"type": "string"}, "message": {"type": "string"},
        "approvers": {"type": "array", "items": {"type": "string"}},
        "satisfied_by": {"type": ["string", "null"]}, "via": {"type": ["string", "null"]}}}
    vote = {"type": "object", "required": ["approver", "approve", "at"], "properties": {
        "approver": {"type": "string"}, "groups": {"type": "array", "items": {"type": "string"}},
        "approve": {"type": "boolean"}, "comment": {"type": "string"}, "at": {"type": "string"},
        "rules": {"type": "array", "items": {"type": "string"}}}}
    return {
        "Error": {
            "type": "object", "required": ["error"], "description": "The one error body of the REST API.",
            "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string", "description": "Stable, machine-readable."},
                "message": {"type": "string", "description": "For people."},
                "rule": {"type": ["string", "null"], "description": "edit-refused: the rule that refused the edit."},
                "verdict": {"type": "string", "description": "edit-refused: the policies' verdict on the edit."}}}},
        },
        "Tool": {
            "type": "object", "required": ["name", "input_schema", "upstream"],
            "properties": {"name": {"type": "string"}, "title": {"type": ["string", "null"]},
                           "description": {"type": ["string", "null"]}, "input_schema": any_object,
                           "annotations": {"type": ["object", "null"]}, "upstream": {"type": "string"},
                           "output_schema": {"type": ["object", "null"],
                                             "description": "The MCP tool's outputSchema, if it has one."}},
        },
        "ToolList": {"type": "object", "required": ["tools"],
                     "properties": {"tools": {"type": "array", "items": _ref("Tool")}}},
        "InvokeRequest": {
            "type": "object",
            "properties": {
                "arguments": {"type": "object", "description": "The tool's arguments (its input_schema)."},
                "call_id": {"type": "string", "description": "Names the call; invoke again with the same id to "
                                                             "collect the outcome of a call held for approval."},
                "session_id": {"type": "string", "description": "The run id; else the X-Gateway-Session header, "
                                                                "else the implicit run of this key and User-Agent "
                                                                "(docs/runs.md)."},
                "iteration": {"type": "integer", "minimum": 0, "description": "The agent loop's step, for policies "
                                                                              "(default: the run's call count)."},
            },
        },
        "CallOutcome": {
            "type": "object", "required": ["call_id", "decision", "is_error", "content"],
            "properties": {"call_id": {"type": "string"}, "decision": {"type": "string"},
                           "is_error": {"type": "boolean", "description": "True for a refusal or a failed tool."},
                           "content": {"type": "array", "items": any_object}, "structured": {},
                           "meta": {"type": ["object", "null"]}},
        },
        "PendingCall": {
            "type": "object", "required": ["call_id", "decision", "approval_id", "status_url"],
            "properties": {"call_id": {"type": "string"}, "decision": {"const": "pending"},
                           "approval_id": {"type": "string"}, "status_url": {"type": "string"},
                           "message": {"type": "string"}},
        },
        "PolicyStatus": {"type": "object", "description": "The loaded policy set: revision, files, rules, errors.",
                         "properties": {"revision": {"type": "string"}, "errors": {"type": "array"}}},
        "Approval": {
            "type": "object",
            "required": ["id", "call_id", "args_digest", "state", "principal", "tool", "requirements", "votes"],
            "properties": {
                "id": {"type": "string"}, "call_id": {"type": "string"}, "args_digest": {"type": "string"},
                "state": {"enum": [str(s) for s in ApprovalState]},
                "principal": {"type": "object", "properties": {
                    "id": {"type": "string"}, "groups": {"type": "array", "items": {"type": "string"}},
                    "kind": {"enum": ["key", "jwt", "anonymous"]},
                    "issuer": {"type": "string", "description": "The token's issuer (kind jwt only)."},
                    "subject": {"type": "string", "description": "The token's subject (kind jwt only)."},
                    "token_id_hash": {"type": "string", "description": "SHA-256 hex of the token's jti, if any."}}},
                "session": {"type": "string"}, "tool": {"type": "string"},
                "upstream": {"type": "string", "description": "Whose tool it was asked for (\"client\": an agent-run"
                             " tool of the model proxy; \"\" for a request stored before upstreams were recorded)."},
                "bound_by": {"enum": ["call_id", "run", "principal"]},
                "original_args": any_object, "final_args": any_object,
                "requirements": {"type": "array", "items": requirement},
                "created_at": {"type": "string"}, "expires_at": {"type": "string"},
                "on_timeout": {"type": "string"}, "votes": {"type": "array", "items": vote},
                "decided_at": {"type": ["string", "null"]},
                "args_redacted": {"type": "boolean", "description": "The arguments were stored redacted "
                                  "(approvals.redact): the request cannot be approved with an edit."},
                "edit": {"type": ["object", "null"], "description": "The approver's edit it was approved with: the "
                         "call runs with these arguments (null: as asked).", "properties": {
                             "by": {"type": "string"}, "at": {"type": "string"}, "arguments": any_object,
                             "final_args": {**any_object, "description": "The edited arguments after the policies' "
                                            "rewrites: what the call runs with."},
                             "digest": {"type": "string"}, "verdict": {"enum": ["allow", "approve"]},
                             "decided_by": {"type": ["string", "null"]}}},
                "run": {"type": "object", "description": "A pending request's run as the store has it now: its "
                        "labels, its calls, and the latest of them, oldest first (absent when it cannot be read).",
                        "properties": {"labels": strings, "calls": {"type": "integer", "minimum": 0},
                                       "history": {"type": "array", "items": _ref("HistoryEntry")}}},
            },
        },
        "HistoryEntry": {
            "type": "object", "required": ["tool", "verdict", "rule", "labels", "time"],
            "properties": {"tool": {"type": "string"}, "verdict": {"type": "string"},
                           "rule": {"type": "string", "description": "The rule that decided it (\"\" if none)."},
                           "labels": {**strings, "description": "The labels this call added to the run."},
                           "time": {"type": "string", "format": "date-time"}},
        },
        "ApprovalPage": {
            "type": "object", "required": ["approvals", "total", "offset", "limit"],
            "properties": {"approvals": {"type": "array", "items": _ref("Approval")},
                           "total": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0},
                           "limit": {"type": "integer", "minimum": 1}},
        },
        "Decision": {
            "type": "object", "required": ["approve"],
            "properties": {"approve": {"type": "boolean"}, "comment": {"type": "string"},
                           "arguments": {"type": "object", "description": "With approve true only: the arguments to "
                                         "run the call with instead of the agent's. The edited call is decided again "
                                         "by the request-stage policies for the agent's principal and run first; "
                                         "an edit they refuse, or that the tool cannot take, is 422 and changes "
                                         "nothing."}},
        },
        "Session": {
            "type": "object",
            "required": ["principal", "id", "implicit", "started_at", "calls", "rejected", "terminated"],
            "properties": {
                "principal": {"type": "string"}, "id": {"type": "string"},
                "implicit": {"type": "boolean", "description": "The gateway made the run up (no run id given)."},
                "client": {"type": ["string", "null"]}, "started_at": {"type": "string"},
                "calls": {"type": "integer", "minimum": 0},
                "calls_by_tool": {"type": "object", "additionalProperties": {"type": "integer"}},
                "rejected": {"type": "integer", "minimum": 0}, "terminated": {"type": "boolean"},
                "terminate_message": {"type": ["string", "null"]},
                "labels": {**strings, "description": "Every label added in the run, in the order added."},
                "tallies": {"type": "object", "additionalProperties": {"type": "number"},
                            "description": "Each tally's value: a sum, or a distinct tally's count."},
                "seen": {"type": "object", "additionalProperties": strings,
                         "description": "A distinct tally's values so far (a bounded list)."},
                "history": {"type": "array", "items": _ref("HistoryEntry"),
                            "description": "The run's latest calls, oldest first."}},
        },
        "SessionPage": {
            "type": "object", "required": ["sessions", "total", "offset", "limit"],
            "properties": {"sessions": {"type": "array", "items": _ref("Session")},
                           "total": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0},
                           "limit": {"type": "integer", "minimum": 1}},
        },
        "EndSession": {"type": "object", "properties": {
            "message": {"type": "string", "description": "What the agent reads on its next call."}}},
        "Health": {"type": "object", "required": ["status"],
                   "properties": {"status": {"const": "ok"}, "revision": {"type": "string"},
                                  "tools": {"type": "integer", "minimum": 0}}},
        "Readiness": {"type": "object", "required": ["status", "revision", "upstreams"], "properties": {
            "status": {"enum": ["ready", "not_ready"]}, "revision": {"type": "string"},
            "upstreams": {"type": "array", "items": {
                "type": "object", "required": ["name", "state", "since", "last_error", "tools"], "properties": {
                    "name": {"type": "string"}, "state": {"enum": ["starting", "up", "down"]},
                    "since": {"type": "string", "format": "date-time"},
                    "last_error": {"type": ["string", "null"],
                                   "description": "A short reason (no URL, path or secret); details are in the log."},
                    "tools": {"type": "integer", "minimum": 0}}}},
            "store": {"type": "object", "required": ["state", "last_error"], "properties": {
                "state": {"enum": ["up", "down"]},
                "last_error": {"type": ["string", "null"],
                               "description": "A short reason (no address or secret); details are in the log."}}}}},
    }


def _responses() -> Json:
    error = {_JSON: {"schema": _ref("Error")}}
    said = {
        "BadRequest": "The request is malformed (invalid JSON, a field of the wrong type, a value out of range).",
        "Unauthorized": "No valid API key (send 'Authorization: Bearer KEY' or 'X-API-Key: KEY').",
        "Forbidden": "This key may not do that, or the request's Origin or Host is not allowed.",
        "NotFound": "No such tool, approval request or session (for this key).",
        "Unavailable": "The audit log could not record the change, so it was not made.",
        "Conflict": "The approval request is already decided or expired (or its arguments cannot be edited).",
        "EditRefused": "The edited arguments are not ones the tool takes (invalid-edit), or the request-stage policies"
                       " refuse the edited call (edit-refused, naming the rule); nothing changed.",
        "TooLarge": "The request body is larger than the configured limit.",
        "UnsupportedMediaType": "The body must be sent as application/json.",
        "TooManyRequests": "This principal is over its configured rate or concurrency limit.",
    }
    return {name: {"description": text, "content": error} for name, text in said.items()}


def _operations() -> Json:
    name = {"name": "name", "in": "path", "required": True, "description": "The exposed tool name.",
            "schema": {"type": "string", "pattern": _ID_PATTERN}}
    approval_id = {"name": "approval_id", "in": "path", "required": True,
                   "schema": {"type": "string", "pattern": _ID_PATTERN}}
    wait = {"name": "wait", "in": "query", "required": False,
            "description": "Hold the request this many seconds for an approval (0, the default, answers 202 at "
                           "once). A duration such as '30s' or '2m' is accepted too.",
            "schema": {"type": "integer", "minimum": 0, "maximum": int(MAX_REST_WAIT_SECONDS), "default": 0}}
    principal = {"name": "principal", "in": "path", "required": True, "description": "The run's principal id.",
                 "schema": {"type": "string", "pattern": _ID_PATTERN}}
    session_id = {"name": "session_id", "in": "path", "required": True, "description": "The run id.",
                  "schema": {"type": "string", "pattern": _ID_PATTERN}}
    flag = {"type": "string", "enum": ["true", "false"]}
    one_session = "/v1/admin/sessions/{principal}/{session_id}"
    return {
        "/v1/admin/sessions": {"get": {
            "operationId": "listSessions", "summary": "Agent runs, newest first (admin keys only).",
            "parameters": [
                {"name": "principal", "in": "query", "required": False, "schema": {"type": "string"}},
                {"name": "implicit", "in": "query", "required": False, "schema": flag},
                {"name": "terminated", "in": "query", "required": False, "schema": flag},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": MAX_SESSIONS_PAGE, "default": 100}},
                {"name": "offset", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "default": 0}}],
            "responses": {"200": _body(_ref("SessionPage"), "One page of runs."), **_EDGE_ERRORS}}},
        one_session: {"get": {
            "operationId": "getSession", "summary": "One agent run's counters (admin keys only).",
            "parameters": [principal, session_id],
            "responses": {"200": _body(_ref("Session"), "The run."), "404": _error("NotFound"), **_EDGE_ERRORS}}},
        f"{one_session}/reset": {"post": {
            "operationId": "resetSession", "summary": "Counters to zero and not terminated (admin keys only; audited).",
            "parameters": [principal, session_id],
            "requestBody": {"required": True, "content": {_JSON: {"schema": {"type": "object"}}}},
            "responses": {"200": _body(_ref("Session"), "The run after the reset."), "404": _error("NotFound"),
                          "503": _error("Unavailable"), **_BODY_ERRORS}}},
        f"{one_session}/end": {"post": {
            "operationId": "endSession",
            "summary": "Terminate the run; an implicit run's client starts a new one (admin keys only; audited).",
            "parameters": [principal, session_id],
            "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("EndSession")}}},
            "responses": {"200": _body(_ref("Session"), "The run after it ended."), "404": _error("NotFound"),
                          "503": _error("Unavailable"), **_BODY_ERRORS}}},
        "/healthz": {"get": {
            "operationId": "health", "summary": "Liveness, the policy revision and the number of tools.",
            "security": [], "responses": {"200": _body(_ref("Health"), "The gateway is serving.")}}},
        "/readyz": {"get": {
            "operationId": "ready",
            "summary": "Readiness: every upstream's state, the store's, and the policy revision.",
            "security": [], "responses": {
                "200": _body(_ref("Readiness"), "Every upstream is up, and the store answers."),
                "503": _body(_ref("Readiness"), "At least one upstream is starting or down (retried in the "
                                                "background), or the store cannot be read.")}}},
        "/metrics": {"get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics (keys with metrics: true or admin: true; docs/observability.md).",
            "responses": {"200": {"description": "The Prometheus text exposition format.",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}, **_EDGE_ERRORS}}},
        "/v1/tools": {"get": {
            "operationId": "listTools", "summary": "The tools this key may see.",
            "responses": {"200": _body(_ref("ToolList"), "The visible tools."), **_EDGE_ERRORS}}},
        "/v1/tools/{name}/invoke": {"post": {
            "operationId": "invokeTool", "summary": "Call a tool through the policies.",
            "parameters": [name, wait],
            "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("InvokeRequest")}}},
            "responses": {
                "200": _body(_ref("CallOutcome"), "The outcome: the tool's result, or a refusal the model reads "
                                                  "(is_error true)."),
                "202": _body(_ref("PendingCall"), "Held for approval; invoke again with the same call_id."),
                "404": _error("NotFound"), **_BODY_ERRORS}}},
        "/v1/policies": {"get": {
            "operationId": "policyStatus", "summary": "The loaded policy set and the last reload's errors.",
            "responses": {"200": _body(_ref("PolicyStatus"), "The policy status."), **_EDGE_ERRORS}}},
        "/v1/approvals": {"get": {
            "operationId": "listApprovals", "summary": "Approval requests, newest first (approvers only).",
            "parameters": [
                {"name": "state", "in": "query", "required": False,
                 "schema": {"enum": [str(s) for s in ApprovalState]}},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": MAX_APPROVALS_PAGE, "default": 200}},
                {"name": "offset", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "default": 0}}],
            "responses": {"200": _body(_ref("ApprovalPage"), "One page of requests."), **_EDGE_ERRORS}}},
        "/v1/approvals/{approval_id}": {"get": {
            "operationId": "getApproval", "summary": "One approval request (approvers, and the caller who asked).",
            "parameters": [approval_id],
            "responses": {"200": _body(_ref("Approval"), "The request."), "404": _error("NotFound"),
                          **_EDGE_ERRORS}}},
        "/v1/approvals/{approval_id}/decision": {"post": {
            "operationId": "decideApproval",
            "summary": "Approve (as asked, or with the arguments edited) or deny a request (approvers only).",
            "parameters": [approval_id],
            "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("Decision")}}},
            "responses": {"200": _body(_ref("Approval"), "The request after this vote."),
                          "404": _error("NotFound"), "409": _error("Conflict"), "422": _error("EditRefused"),
                          **_BODY_ERRORS}}},
    }


def openapi_document() -> Json:
    """The OpenAPI 3.1 description of the REST API (a fresh dict each call)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "agent-policy-gateway REST API", "version": __version__,
                 "description": "Call tools through the gateway's policies, and decide approval requests. "
                                "Errors are {\"error\": {\"code\", \"message\"}}."},
        "paths": {**_operations(), **console_operations(_body, _ref, _error, _EDGE_ERRORS)},
        "components": {
            "schemas": {**_schemas(), **console_schemas()},
            "responses": _responses(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API key from gateway.yaml."},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
        },
        # Either scheme; an operation with `security: []` (/healthz, /readyz) needs none. A gateway
        # configured for anonymous access accepts requests without a key too.
        "security": [{"bearer": []}, {"apiKey": []}],
    }


def openapi_routes() -> list[Route]:
    """``GET /openapi.json`` (no authentication: the document is the same for every gateway)."""
    body = openapi_document()

    async def document(request: Request) -> JSONResponse:
        return JSONResponse(body)

    return [Route(OPENAPI_PATH, document, methods=["GET"])]
