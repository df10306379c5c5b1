"""The approver API: list, read and decide approval requests.

    GET  /v1/approvals?state=pending&tool=&principal=&q=&limit=200&offset=0
                                          → {approvals, total, offset, limit}
    GET  /v1/approvals/{id}               (approvers who may see it, and the caller who asked)
    POST /v1/approvals/{id}/decision      {approve: bool, comment, arguments?}  → 200 | 403 | 404 | 409 | 422 | 503

An approver sees the requests some requirement lets them decide (their user id, one of their
groups, or a rule open to any approver); a key with ``admin: true`` sees every request. A request
an approver may not see is "not found" to them. A locked database answers 503 ``store-unavailable``.

An approval may carry ``arguments``: the approver's edit of the call's arguments. The edited call is decided
again by the request-stage policies for the call's own principal and run (``judge_edit``, the pipeline's
question) before it is approved; a refused or invalid edit is 422 and changes nothing (``approvals/edits.py``).

A pending request also shows its run's labels and latest calls (``run``, see ``approval_runs``), read from
the session store given; when the run cannot be read the request is listed without it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.approvals.model import Approval, ApprovalState
from gateway.approvals.service import ApprovalService
from gateway.approvals.store import ListFilter
from gateway.core.errors import ApprovalError, EditNotPossible, EditRefused, StoreUnavailable
from gateway.core.limits import MAX_APPROVALS_FILTER_CHARS, MAX_APPROVALS_PAGE
from gateway.frontends.approval_runs import RunViews
from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response, read_json_object
from gateway.pipeline.approvals import EditAsk, EditedCall
from gateway.store.base import SessionStore

__all__ = ["approval_routes"]

_STATES = {str(s) for s in ApprovalState}

# The pipeline's question that decides an approver's edit (``Gateway.judge_edit``).
JudgeEdit = Callable[[EditAsk], Awaitable[EditedCall]]


def _unavailable(exc: StoreUnavailable) -> JSONResponse:
    return error_response(exc.status, exc.code, "The approvals database is busy; try again shortly.")


def approval_routes(service: ApprovalService, sessions: SessionStore | None = None,
                    judge_edit: JudgeEdit | None = None) -> list[Route]:
    """Routes for approvers (they expect ``RequireIdentity`` in front); pending requests show their run from
    ``sessions``; edits are decided by ``judge_edit`` (without it, an approval cannot edit the arguments)."""
    api = _ApproverApi(service, RunViews(sessions), judge_edit)
    return [
        Route("/v1/approvals", api.list_approvals, methods=["GET"]),
        Route("/v1/approvals/{approval_id}", api.get_approval, methods=["GET"]),
        Route("/v1/approvals/{approval_id}/decision", api.decide, methods=["POST"]),
    ]


class _ApproverApi:
    """The approver endpoints, over one approval service."""

    def __init__(self, service: ApprovalService, runs: RunViews, judge_edit: JudgeEdit | None) -> None:
        self.service = service
        self.runs = runs
        self.judge_edit = judge_edit

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
        """POST /v1/approvals/{id}/decision: approve (as asked, or with the arguments edited) or deny."""
        identity = identity_of(request.scope)
        if not identity.approver:
            return error_response(403, "not-an-approver", "This key may not decide approval requests.")
        body = await read_json_object(request)
        if isinstance(body, JSONResponse):
            return body
        approve, comment, arguments = body.get("approve"), body.get("comment", ""), body.get("arguments")
        if not isinstance(approve, bool) or not isinstance(comment, str):
            return error_response(400, "invalid-decision", "Send {\"approve\": true|false, \"comment\": \"...\"}.")
        if arguments is not None and not (approve and isinstance(arguments, dict)):
            return error_response(400, "invalid-decision", "\"arguments\" go only with \"approve\": true, as a JSON "
                                                           "object: the edited arguments the call is approved with.")
        approval_id = request.path_params["approval_id"]
        try:
            if arguments is None:
                approval = await self.service.decide(approval_id, identity.principal, approve, comment)
            else:
                approval = await self.service.approve_edited(approval_id, identity.principal, arguments, comment,
                                                             self._judged)
        except EditRefused as exc:  # the rule that refused the edited call, for a program to read
            return JSONResponse({"error": {"code": exc.code, "message": str(exc), "rule": exc.rule,
                                           "verdict": exc.verdict}}, status_code=exc.status)
        except ApprovalError as exc:
            return error_response(exc.status, exc.code, str(exc))
        except StoreUnavailable as exc:
            return _unavailable(exc)
        return JSONResponse(approval.to_dict())

    async def _judged(self, approval: Approval, arguments: dict[str, Any]) -> EditedCall:
        """The request-stage decision on an edit, for the held call's own principal and run."""
        if self.judge_edit is None:
            raise EditNotPossible("This gateway does not decide edits of arguments; approve the call as asked, "
                                  "or deny it.")
        return await self.judge_edit(EditAsk(approval.principal, approval.session_id, approval.tool,
                                             approval.upstream, approval.call_id, arguments))
