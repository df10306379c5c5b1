"""The approver API: list, read and decide approval requests.

    GET  /v1/approvals?state=pending&limit=200&offset=0   → {approvals, total, offset, limit}
    GET  /v1/approvals/{id}               (approvers, and the caller who asked)
    POST /v1/approvals/{id}/decision      {approve: bool, comment}  → 200 | 403 | 404 | 409
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.approvals.model import ApprovalState
from gateway.approvals.service import ApprovalService
from gateway.errors import ApprovalError
from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response, read_json_object
from gateway.limits import MAX_APPROVALS_PAGE

__all__ = ["approval_routes"]

_STATES = {str(s) for s in ApprovalState}


def approval_routes(service: ApprovalService) -> list[Route]:
    """Routes for approvers (they expect ``RequireIdentity`` in front)."""

    async def list_approvals(request: Request) -> JSONResponse:
        if not identity_of(request.scope).approver:
            return error_response(403, "not-an-approver", "This key may not see approval requests.")
        state = request.query_params.get("state")
        if state is not None and state not in _STATES:
            return error_response(400, "invalid-state", f"state must be one of {', '.join(sorted(_STATES))}")
        try:
            limit = int(request.query_params.get("limit", 200))
            offset = int(request.query_params.get("offset", 0))
        except ValueError:
            return error_response(400, "invalid-page", "limit and offset must be whole numbers")
        if not (1 <= limit <= MAX_APPROVALS_PAGE and 0 <= offset < 2**63):  # SQLite integers are 64-bit
            return error_response(400, "invalid-page", f"limit must be 1..{MAX_APPROVALS_PAGE}, offset 0 or more")
        page, total = service.store.list_requests(state, limit, offset)
        return JSONResponse({"approvals": [a.to_dict() for a in page], "total": total, "offset": offset,
                             "limit": limit})

    async def get_approval(request: Request) -> JSONResponse:
        identity = identity_of(request.scope)
        approval = service.store.get(request.path_params["approval_id"])
        if approval is None or not (identity.approver or identity.principal.id == approval.principal.id):
            return error_response(404, "approval-not-found", "No such approval request.")
        return JSONResponse(approval.to_dict())

    async def decide(request: Request) -> JSONResponse:
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
            approval = service.decide(request.path_params["approval_id"], identity.principal, approve, comment)
        except ApprovalError as exc:
            return error_response(exc.status, exc.code, str(exc))
        return JSONResponse(approval.to_dict())

    return [
        Route("/v1/approvals", list_approvals, methods=["GET"]),
        Route("/v1/approvals/{approval_id}", get_approval, methods=["GET"]),
        Route("/v1/approvals/{approval_id}/decision", decide, methods=["POST"]),
    ]
