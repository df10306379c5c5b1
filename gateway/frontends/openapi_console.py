"""The console's read-only API in the OpenAPI document (gateway/frontends/console_api.py; docs/console.md)."""

from __future__ import annotations

from typing import Any

from gateway.core.limits import MAX_SESSIONS_PAGE

__all__ = ["console_operations", "console_schemas"]

Json = dict[str, Any]

_TEXT = {"type": "string"}
_TIME = {"type": "string", "format": "date-time"}
_FILTERS = [{"name": name, "in": "query", "required": False, "schema": _TEXT, "description": about}
            for name, about in (("since", "RFC 3339; default a day ago"), ("until", "RFC 3339"),
                                ("tool", "exposed tool name"), ("principal", "principal id"),
                                ("verdict", "allow, reject, approve, ..."), ("rule", "the deciding rule's id"),
                                ("run", "run (session) id"), ("upstream", "upstream name"))]
_LIMIT = {"name": "limit", "in": "query", "required": False,
          "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}}
_CURSOR = {"name": "cursor", "in": "query", "required": False, "schema": _TEXT,
           "description": "the `next` of the previous page"}
_PATH = {"type": "string", "pattern": "^[^/]+$"}


def _object(**properties: Any) -> Json:
    return {"type": "object", "properties": properties}


def console_schemas() -> Json:
    """The console's response shapes."""
    nullable_text = {"type": ["string", "null"]}
    return {
        "ConsoleDecision": _object(
            id=_TEXT, time=_TIME, replica=_TEXT, event=_TEXT, principal=nullable_text, run=nullable_text,
            client=nullable_text, tool=nullable_text, upstream=nullable_text, verdict=nullable_text,
            rule=nullable_text, rule_source={"type": ["object", "null"]}, call_id=nullable_text,
            is_error={"type": ["boolean", "null"]}, message={}, latency={"type": "object"}, arguments={},
            original_arguments={}, approval={"type": ["object", "null"]}, labels={"type": "array"},
            edited_by=nullable_text, edited_arguments={}),
        "ConsoleDecisionPage": _object(decisions={"type": "array", "items": {"$ref": "#/components/schemas/"
                                                                                    "ConsoleDecision"}},
                                       next=nullable_text, total={"type": "integer"},
                                       total_more={"type": "boolean"}),
        "ConsoleChart": _object(minutes={"type": "array", "items": _object(minute=_TIME, counts={"type": "object"})}),
        "ConsoleRunPage": _object(runs={"type": "array", "items": {"type": "object"}}, next=nullable_text,
                                  total={"type": "integer"}),
        "ConsoleRun": _object(run={"type": "object"}, timeline={"type": "array", "items": {
            "$ref": "#/components/schemas/ConsoleDecision"}}),
        "ConsolePolicies": _object(revision=_TEXT, engine=_TEXT, files={"type": "array"},
                                   never_fired={"type": "array", "items": _TEXT}, reloads={"type": "array"}),
        "ConsoleUpstreams": _object(upstreams={"type": "array"}, tools_lock={"type": ["object", "null"]}),
        "WhoAmI": _object(principal=_TEXT, admin={"type": "boolean"}, approver={"type": "boolean"}),
    }


def console_operations(body: Any, ref: Any, error: Any, errors: Json) -> Json:
    """The console's paths; ``body``, ``ref``, ``error`` and ``errors`` are the document's own helpers."""
    def get(operation: str, summary: str, schema: str, parameters: list[Json], extra: Json | None = None) -> Json:
        return {"get": {"operationId": operation, "summary": summary, "parameters": parameters,
                        "responses": {"200": body(ref(schema), summary), "503": error("Unavailable"),
                                      **(extra or {}), **errors}}}

    run = [{"name": "principal", "in": "path", "required": True, "schema": _PATH},
           {"name": "run", "in": "path", "required": True, "schema": _PATH},
           {"name": "approval", "in": "query", "required": False, "schema": _TEXT,
            "description": "an approver names a request of the run they may see"}]
    export = get("exportDecisions", "The selection as JSON lines (admin keys only).", "ConsoleDecision",
                 [*_FILTERS, {**_LIMIT, "schema": {"type": "integer", "minimum": 1, "maximum": 100_000}}])
    export["get"]["responses"]["200"] = {"description": "One decision a line.",
                                         "content": {"application/x-ndjson": {"schema": _TEXT}}}
    return {
        "/v1/admin/whoami": get("whoAmI", "Who this key is, and whether it is an admin or an approver.", "WhoAmI",
                                []),
        "/v1/admin/decisions": get("listDecisions", "Decisions of every replica, newest first (admin keys only).",
                                   "ConsoleDecisionPage", [*_FILTERS, _LIMIT, _CURSOR]),
        "/v1/admin/decisions/chart": get("chartDecisions", "Calls per minute by verdict (admin keys only).",
                                         "ConsoleChart", _FILTERS),
        "/v1/admin/decisions/export": export,
        "/v1/admin/runs": get("listRuns", "Runs, newest first (admin keys only).", "ConsoleRunPage", [
            {"name": "principal", "in": "query", "required": False, "schema": _TEXT},
            {"name": "terminated", "in": "query", "required": False, "schema": {"type": "string",
                                                                                 "enum": ["true", "false"]}},
            {**_LIMIT, "schema": {"type": "integer", "minimum": 1, "maximum": MAX_SESSIONS_PAGE, "default": 50}},
            {**_CURSOR, "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"}}]),
        "/v1/admin/runs/{principal}/{run}": get("getRun", "One run and its calls in order.", "ConsoleRun", run,
                                                {"404": error("NotFound")}),
        "/v1/admin/policies": get("consolePolicies", "Rules with their hits, rules that never fired, reloads"
                                  " (admin keys only).", "ConsolePolicies", []),
        "/v1/admin/upstreams": get("consoleUpstreams", "Upstreams with their tools and drift (admin keys only).",
                                   "ConsoleUpstreams", []),
    }
