"""The approver API: list, read and decide approval requests.

    GET  /v1/approvals?state=pending&tool=&principal=&q=&limit=200&offset=0
                                          → {approvals, total, offset, limit}
    GET  /v1/approvals/{id}               (approvers who may see it, and the caller who asked)
    POST /v1/approvals/{id}/decision      {approve: bool, comment}  → 200 | 403 | 404 | 409 | 503

An approver sees the requests some requirement lets them decide (their user id, one of their
groups, or a rule open to any approver); a key with ``admin: true`` sees every request. A request
an approver may not see is "not found" to them. A locked database answers 503 ``store-unavailable``.

A pending request also shows its run's labels and latest calls (``run``, see ``approval_runs``), read from
the session store given; when the run cannot be read the request is listed without it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.approvals.model import ApprovalState
from gateway.approvals.service import ApprovalService
from gateway.approvals.store import ListFilter
from gateway.core.errors import ApprovalError, StoreUnavailable
from gateway.core.limits import MAX_APPROVALS_FILTER_CHARS, MAX_APPROVALS_PAGE
from gateway.frontends.approval_runs import RunViews
from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response, read_json_object
from gateway.store.base import SessionStore

__all__ = ["approval_routes"]

_STATES = {str(s) for s in ApprovalState}


def _unavailable(exc: StoreUnavailable) -> JSONResponse:
    return error_response(exc.status, exc.code, "The approvals database is busy; try again shortly.")


def approval_routes(service: ApprovalService, sessions: SessionStore | None = None) -> list[Route]:
    """Routes for approvers (they expect ``RequireIdentity`` in front); pending requests show their run from
    ``sessions``."""
    api = _ApproverApi(service, RunViews(sessions))
    return [
        Route("/v1/approvals", api.list_approvals, methods=["GET"]),
        Route("/v1/approvals/{approval_id}", api.get_approval, methods=["GET"]),
        Route("/v1/approvals/{approval_id}/decision", api.decide, methods=["POST"]),
    ]


class _ApproverApi:
    """The approver endpoints, over one approval service."""

    def __init__(self, service: ApprovalService, runs: RunViews) -> None:
        self.service = service
        self.runs = runs

    async def list_approvals(self, request: Request) -> JSONResponse:
        """GET /v1/approvals: one page of the requests the caller may see."""
        identity = identity_of(request.scope)
        if not (identity.approver or identity.admin):
            return error_response(403, "not-an-approver", "This key may not see approval requests.")
        query = request.query_params
        state = query.get("state") or None
        if state is not None and state not in _STATES:
            return error_response(400, "invalid-state", f"state must be one of {', '.join(sorted(_STATES))}")
        texts = {name: query.get(name) or None for name in ("tool", "principal", "q")}
        if any(v is not None and len(v) > MAX_APPROVALS_FILTER_CHARS for v in texts.values()):
            return error_response(400, "invalid-filter", f"filters are at most {MAX_APPROVALS_FILTER_CHARS} characters")
        try:
            limit = int(query.get("limit", 200))
            offset = int(query.get("offset", 0))
        except ValueError:
            return error_response(400, "invalid-page", "limit and offset must be whole numbers")
        if not (1 <= limit <= MAX_APPROVALS_PAGE and 0 <= offset < 2**63):  # SQLite integers are 64-bit
            return error_response(400, "invalid-page", f"limit must be 1..{MAX_APPROVALS_PAGE}, offset 0 or more")
        which = ListFilter(state=state, tool=texts["tool"], principal=texts["principal"], text=texts["q"],
                           audience=self.service.audience(identity.principal, identity.admin))
        try:
            page, total = await self.service.listing(which, limit, offset)
        except StoreUnavailable as exc:
            return _unavailable(exc)
        return JSONResponse({"approvals": await self.runs.views(page), "total": total, "offset": offset,
                             "limit": limit})

    async def get_approval(self, request: Request) -> JSONResponse:
        """GET /v1/approvals/{id}: one request, to approvers who may see it and the caller who asked."""
        identity = identity_of(request.scope)
        try:
            approval = await self.service.get(request.path_params["approval_id"])
        except StoreUnavailable as exc:
            return _unavailable(exc)
        reader = identity.approver or identity.admin
        if approval is None or not (identity.principal.key == approval.principal.key or (
                reader and self.service.may_see(approval, identity.principal, identity.admin))):
            return error_response(404, "approval-not-found", "No such approval request.")
        return JSONResponse(await self.runs.view(approval))

    async def decide(self, request: Request) -> JSONResponse:
        """POST /v1/approvals/{id}/decision: approve or deny."""
        identity = identity_of(request.scope)
        if not identity.approver:
            return error_response(403, "not-an-approver", "This key may not decide approval requests.")
        body = await read_json_object(request)
        if isinstance(body, JSONResponse):
            return body
        approve, comment = body.get("approve"), body.get("comment", "")
        if not isinstance(approve, bool) or not isinstance(comment, str):
            return error_response(400, "invalid-decision", "Send {\"approve\": true|false, \"comment\": \"...\"}.")
        try:
            approval = await self.service.decide(request.path_params["approval_id"], identity.principal, approve,
                                                 comment)
        except ApprovalError as exc:
            return error_response(exc.status, exc.code, str(exc))
        except StoreUnavailable as exc:
            return _unavailable(exc)
        return JSONResponse(approval.to_dict())
