"""The operator console's read-only API (docs/console.md), over the store's copy of the decision log.

    GET /v1/admin/whoami                           any key: who it is, and whether it is an admin or approver
    GET /v1/admin/decisions?since&until&tool&principal&verdict&rule&run&upstream&limit&cursor
                                                   newest first, keyset-paged; every replica's calls; ``total``
                                                   counts up to 10,000 (``total_more``: there are more)
    GET /v1/admin/decisions/chart?<the same>       calls per minute by verdict
    GET /v1/admin/decisions/export?<the same>      JSON lines of the selection (at most 100,000)
    GET /v1/admin/runs?principal&terminated&limit&cursor   runs from the store, newest first
    GET /v1/admin/runs/{principal}/{run}[?approval=ID]     one run and its calls in order (an approver may
                                                   read the run of a request they may see, naming it)
    GET /v1/admin/policies                         the loaded set's files and rules with hit counts, rules that
                                                   never fired, the last reloads
    GET /v1/admin/upstreams                        each upstream's state, tools, schemas and drift

Admins only, but ``whoami`` and a run read with ``approval``; ending and resetting a run are the sessions API's.
Times are RFC 3339; ``since`` defaults to a day ago. What the events hold was redacted when they were written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import iterate_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from gateway.approvals.service import ApprovalService
from gateway.core.clock import parse_rfc3339
from gateway.core.errors import StoreUnavailable
from gateway.core.limits import MAX_APPROVALS_FILTER_CHARS, MAX_SESSIONS_PAGE
from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response
from gateway.policy.compiled import CompiledRule
from gateway.policy.policyset import PolicySet
from gateway.store.base import SessionStore
from gateway.store.decision_queries import COUNT_BOUND, DecisionFilter, DecisionQueries, decode_cursor

__all__ = ["ConsoleSources", "console_api_routes"]

_DAY = 86400.0
_MAX_PAGE = 500
_MAX_EXPORT = 100_000
_MAX_TIMELINE = 5_000
_MAX_APPROVALS_SHOWN = 200  # a timeline's approvals looked up for who decided them
_FILTERS = ("tool", "principal", "verdict", "rule", "run", "upstream")


@dataclass(frozen=True)
class ConsoleSources:
    """What the console reads besides the store: built by the composition root (gateway/app/root.py)."""

    policies: Callable[[], PolicySet]  # the set in force
    shown: Callable[[str], str]  # a policy file's path as the API shows it (never absolute)
    upstreams: Callable[[], list[dict[str, Any]]]  # each upstream's state (Supervisor.statuses)
    tools: Callable[[], list[dict[str, Any]]]  # every listed tool with its schema, annotations and drift
    tools_lock: Callable[[], dict[str, Any] | None]


class _BadRequest(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _forbidden() -> JSONResponse:
    return error_response(403, "not-an-admin", "Only keys with admin: true may read the console's data.")


def _time(query: Any, name: str) -> float | None:
    value = query.get(name)
    if not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        raise _BadRequest("invalid-time", f"{name} must be an RFC 3339 time, e.g. 2026-12-01T10:00:00Z") from None


def _filter(request: Request) -> DecisionFilter:
    query = request.query_params
    texts = {name: query.get(name) or "" for name in _FILTERS}
    if any(len(v) > MAX_APPROVALS_FILTER_CHARS for v in texts.values()):
        raise _BadRequest("invalid-filter", f"filters are at most {MAX_APPROVALS_FILTER_CHARS} characters")
    since, until = _time(query, "since"), _time(query, "until")
    return DecisionFilter(since=time.time() - _DAY if since is None else since, until=until, tool=texts["tool"],
                          principal=texts["principal"], verdict=texts["verdict"], rule=texts["rule"], run=texts["run"],
                          upstream=texts["upstream"])


def _limit(request: Request, default: int, most: int) -> int:
    try:
        limit = int(request.query_params.get("limit", default))
    except ValueError:
        raise _BadRequest("invalid-page", "limit must be a whole number") from None
    if not 1 <= limit <= most:
        raise _BadRequest("invalid-page", f"limit must be 1..{most}")
    return limit


class _Console:
    def __init__(self, queries: DecisionQueries, store: SessionStore, sources: ConsoleSources,
                 approvals: ApprovalService | None) -> None:
        self.queries = queries
        self.store = store
        self.sources = sources
        self.approvals = approvals

    async def whoami(self, request: Request) -> JSONResponse:
        identity = identity_of(request.scope)
        return JSONResponse({"principal": identity.principal.id, "admin": identity.admin,
                             "approver": identity.approver})

    async def decisions(self, request: Request) -> JSONResponse:
        if not identity_of(request.scope).admin:
            return _forbidden()
        where, limit = _filter(request), _limit(request, 50, _MAX_PAGE)
        text = request.query_params.get("cursor") or ""
        cursor = decode_cursor(text) if text else None
        if text and cursor is None:
            raise _BadRequest("invalid-cursor", "cursor must be one a previous page gave")
        rows, following, total = await self.queries.page(where, limit, cursor)
        rules = _rules(self.sources.policies())
        return JSONResponse({"decisions": [self._shown(r, rules) for r in rows], "next": following,
                             "total": min(total, COUNT_BOUND), "total_more": total > COUNT_BOUND})

    async def chart(self, request: Request) -> JSONResponse:
        if not identity_of(request.scope).admin:
            return _forbidden()
        return JSONResponse({"minutes": await self.queries.chart(_filter(request))})

    async def export(self, request: Request) -> StreamingResponse | JSONResponse:
        if not identity_of(request.scope).admin:
            return _forbidden()
        where, limit = _filter(request), _limit(request, _MAX_EXPORT, _MAX_EXPORT)
        lines = iterate_in_threadpool(self.queries.export(where, limit))
        return StreamingResponse(lines, media_type="application/x-ndjson",
                                 headers={"content-disposition": 'attachment; filename="decisions.jsonl"',
                                          "cache-control": "no-store"})

    async def runs(self, request: Request) -> JSONResponse:
        if not identity_of(request.scope).admin:
            return _forbidden()
        query = request.query_params
        limit = _limit(request, 50, MAX_SESSIONS_PAGE)
        try:
            offset = int(query.get("cursor") or 0)
        except ValueError:
            raise _BadRequest("invalid-cursor", "cursor must be one a previous page gave") from None
        terminated = {"true": True, "false": False}.get(query.get("terminated") or "")
        await self.store.flushed()
        page, total = await self.store.run(self.store.list_sessions, query.get("principal") or None, None,
                                           terminated, limit, max(offset, 0))
        following = str(offset + limit) if offset + limit < total else None
        return JSONResponse({"runs": [_run(s.to_dict()) for s in page], "next": following, "total": total})

    async def run(self, request: Request) -> JSONResponse:
        identity = identity_of(request.scope)
        principal, run = request.path_params["principal"], request.path_params["run"]
        if not identity.admin and not await self._may_see_run(request, principal, run):
            return error_response(404, "run-not-found", "No such run, or not one this key may see.")
        found = await self.store.find_session(principal, run)
        timeline = await self.queries.timeline(principal, run, _MAX_TIMELINE)
        if found is None and not timeline:
            return error_response(404, "run-not-found", "No such run, or not one this key may see.")
        rules = _rules(self.sources.policies())
        shown_timeline = [self._shown(e, rules) for e in timeline]
        await self._deciders(shown_timeline)
        # a run the store no longer holds (its implicit run ended long ago) still has its calls in the table
        shown = _run(found.to_dict()) if found is not None else {"principal": principal, "run": run,
                                                                  "calls": len(timeline), "gone": True}
        return JSONResponse({"run": shown, "timeline": shown_timeline})

    async def _deciders(self, timeline: list[dict[str, Any]]) -> None:
        """Each approval in ``timeline`` with who decided it (``decided_by``, the approvers' votes) from the store."""
        if self.approvals is None:
            return
        ids = list(dict.fromkeys(d["approval"]["id"] for d in timeline
                                 if d.get("approval") and d["approval"].get("id")))
        votes: dict[str, list[dict[str, Any]]] = {}
        for approval_id in ids[:_MAX_APPROVALS_SHOWN]:
            approval = await self.approvals.get(str(approval_id))
            if approval is not None:
                votes[str(approval_id)] = [{"approver": v.approver, "approve": v.approve, "at": v.at}
                                           for v in approval.votes]
        for decision in timeline:
            approval = decision.get("approval")
            if approval and str(approval.get("id")) in votes:
                cast = votes[str(approval["id"])]
                approval["votes"] = cast
                approval["decided_by"] = [v["approver"] for v in cast]

    async def _may_see_run(self, request: Request, principal: str, run: str) -> bool:
        """An approver names a request they may see; its run is the one asked for."""
        identity = identity_of(request.scope)
        approval_id = request.query_params.get("approval")
        if not (identity.approver and approval_id and self.approvals is not None):
            return False
        approval = await self.approvals.get(approval_id)
        return approval is not None and approval.principal.key == principal and approval.session_id == run \
            and self.approvals.may_see(approval, identity.principal, identity.admin)

    async def policies(self, request: Request) -> JSONResponse:
        if not identity_of(request.scope).admin:
            return _forbidden()
        policy_set = self.sources.policies()
        hits = await self.queries.rule_hits(time.time())
        files: dict[str, list[dict[str, Any]]] = {}
        for rule in policy_set.rules:
            hour, day = hits.get(rule.id, (0, 0))
            files.setdefault(self.sources.shown(rule.file), []).append(
                {"id": rule.id, "line": rule.line, "action": str(rule.action), "stage": str(rule.stage),
                 "hits_hour": hour, "hits_day": day})
        reloads = [_reload(e) for e in await self.queries.recent("policy.reload", 20)]
        return JSONResponse({"revision": policy_set.revision, "engine": policy_set.engine.name,
                             "files": [{"path": path, "rules": rules} for path, rules in files.items()],
                             "never_fired": [r.id for r in policy_set.rules if r.id not in hits],
                             "reloads": reloads})

    async def upstreams(self, request: Request) -> JSONResponse:
        if not identity_of(request.scope).admin:
            return _forbidden()
        tools = self.sources.tools()
        listed = [{**status, "tools": [t for t in tools if t["upstream"] == status["name"]]}
                  for status in self.sources.upstreams()]
        return JSONResponse({"upstreams": listed, "tools_lock": self.sources.tools_lock()})

    def _shown(self, event: dict[str, Any], rules: dict[str, CompiledRule]) -> dict[str, Any]:
        """An event as the console shows it: the deciding rule with its file and line, the latency split."""
        decided = event.get("decided_by") or []
        rule = decided[0] if decided else None
        compiled = rules.get(rule) if rule else None
        latency = event.get("latency") or {}
        approval = event.get("approval")
        return {"id": event.get("id"), "time": event.get("time"), "replica": event.get("replica"),
                "event": event.get("event"), "principal": (event.get("principal") or {}).get("id"),
                "run": event.get("session"), "client": event.get("frontend"), "tool": event.get("tool"),
                "upstream": event.get("upstream"), "verdict": event.get("verdict"), "rule": rule,
                "rule_source": {"file": self.sources.shown(compiled.file), "line": compiled.line} if compiled else None,
                "call_id": event.get("call_id"), "is_error": event.get("is_error"), "message": event.get("message"),
                "latency": {"decision_ms": round(float(latency.get("policy_us") or 0) / 1000, 3),
                            "approval_ms": latency.get("approval_ms"), "upstream_ms": latency.get("upstream_ms"),
                            "total_ms": latency.get("total_ms")},
                "arguments": event.get("final_args"), "original_arguments": event.get("original_args"),
                "approval": approval if isinstance(approval, dict) else None,
                "edited_by": event.get("edited_by"), "edited_arguments": event.get("edited_args"),
                "labels": ((event.get("flow") or {}).get("labels") or [])}


def _rules(policy_set: PolicySet) -> dict[str, CompiledRule]:
    return {r.id: r for r in policy_set.rules}


def _run(session: dict[str, Any]) -> dict[str, Any]:
    return {"principal": session["principal"], "run": session["id"], "client": session.get("client"),
            "implicit": session.get("implicit"), "started": session.get("started_at"), "calls": session.get("calls"),
            "rejected": session.get("rejected"), "terminated": session.get("terminated"),
            "terminate_message": session.get("terminate_message"), "labels": session.get("labels") or [],
            "tallies": session.get("tallies") or {}}


def _reload(event: dict[str, Any]) -> dict[str, Any]:
    errors = event.get("errors") or []
    first = errors[0] if errors else {}
    return {"time": event.get("time"), "result": "applied" if event.get("applied") else "refused",
            "revision": event.get("revision"), "error": first.get("message"), "file": first.get("file"),
            "line": first.get("line")}


def _answering(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """A handler whose bad query is a 400 and whose store failure is a 503."""
    async def endpoint(request: Request) -> Any:
        try:
            return await handler(request)
        except _BadRequest as exc:
            return error_response(400, exc.code, str(exc))
        except StoreUnavailable as exc:
            return error_response(503, "store-unavailable", str(exc))
    return endpoint


def console_api_routes(queries: DecisionQueries, store: SessionStore, sources: ConsoleSources,
                       approvals: ApprovalService | None) -> list[Route]:
    """The console's API routes (``RequireIdentity`` in front)."""
    api = _Console(queries, store, sources, approvals)
    return [Route(path, _answering(handler), methods=["GET"]) for path, handler in (
        ("/v1/admin/whoami", api.whoami), ("/v1/admin/decisions", api.decisions),
        ("/v1/admin/decisions/chart", api.chart), ("/v1/admin/decisions/export", api.export),
        ("/v1/admin/runs", api.runs), ("/v1/admin/runs/{principal}/{run}", api.run),
        ("/v1/admin/policies", api.policies), ("/v1/admin/upstreams", api.upstreams))]
