"""The admin API for agent runs (sessions): list, read, reset and end them. Keys with ``admin: true`` only.

    GET  /v1/admin/sessions?principal=&implicit=true|false&terminated=true|false&limit=100&offset=0
                                                    → {sessions, total, offset, limit}
    GET  /v1/admin/sessions/{principal}/{session_id}               its counters, labels, tallies, seen, history
    POST /v1/admin/sessions/{principal}/{session_id}/reset          counters to zero, no labels, tallies or
                                                    history, not terminated (the principal's usage
                                                    windows keep their tallies)
    POST /v1/admin/sessions/{principal}/{session_id}/end  {message?} terminated with the message; an
                                                    implicit run also stops being current, so its
                                                    client's next call starts a new run

Any other key gets 403. Each reset and end is written to the audit log as a ``session.admin``
event before it takes effect; if it cannot be written, nothing changes (503). A session id that
holds a ``/`` cannot be named in a path: find it with the list (docs/runs.md).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.core.errors import AuditWriteError, StoreUnavailable
from gateway.core.limits import MAX_APPROVALS_FILTER_CHARS, MAX_SESSIONS_PAGE
from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response, read_json_object
from gateway.pipeline import Gateway
from gateway.store.base import SessionStore
from gateway.store.model import SessionState

__all__ = ["ENDED_BY_ADMIN", "session_admin_routes"]

ENDED_BY_ADMIN = "This run was ended by an administrator. Stop calling tools and tell the user."

_BOOLS = {"true": True, "false": False}


def _forbidden() -> JSONResponse:
    return error_response(403, "not-an-admin", "Only keys with admin: true may manage sessions.")


def _not_found() -> JSONResponse:
    return error_response(404, "session-not-found", "No such session.")


def _unavailable(exc: StoreUnavailable) -> JSONResponse:
    return error_response(503, exc.code, str(exc))


def session_admin_routes(gateway: Gateway, store: SessionStore) -> list[Route]:
    """Routes for administrators over ``store`` (they expect ``RequireIdentity`` in front); ``gateway``
    records each change in the audit log with the policy revision."""
    api = _SessionAdmin(gateway, store)
    one = "/v1/admin/sessions/{principal}/{session_id}"
    return [
        Route("/v1/admin/sessions", api.list_sessions, methods=["GET"]),
        Route(one, api.show, methods=["GET"]),
        Route(f"{one}/reset", api.reset, methods=["POST"]),
        Route(f"{one}/end", api.end, methods=["POST"]),
    ]


def _admin(request: Request) -> str | None:
    """The caller's principal id if its key is an admin's."""
    identity = identity_of(request.scope)
    return identity.principal.id if identity.admin else None


class _SessionAdmin:
    """The session admin endpoints, over one store; the gateway records the changes."""

    def __init__(self, gateway: Gateway, store: SessionStore) -> None:
        self.gateway = gateway
        self.store = store

    async def list_sessions(self, request: Request) -> JSONResponse:
        """GET /v1/admin/sessions: one page of runs, filtered."""
        if _admin(request) is None:
            return _forbidden()
        query = request.query_params
        principal = query.get("principal") or None
        if principal is not None and len(principal) > MAX_APPROVALS_FILTER_CHARS:
            return error_response(400, "invalid-filter",
                                  f"principal is at most {MAX_APPROVALS_FILTER_CHARS} characters")
        flags: dict[str, bool | None] = {}
        for name in ("implicit", "terminated"):
            value = query.get(name)
            if value is not None and value not in _BOOLS:
                return error_response(400, "invalid-filter", f"{name} must be true or false")
            flags[name] = None if value is None else _BOOLS[value]
        try:
            limit, offset = int(query.get("limit", 100)), int(query.get("offset", 0))
        except ValueError:
            return error_response(400, "invalid-page", "limit and offset must be whole numbers")
        if not (1 <= limit <= MAX_SESSIONS_PAGE and 0 <= offset < 2**63):  # SQLite integers are 64-bit
            return error_response(400, "invalid-page", f"limit must be 1..{MAX_SESSIONS_PAGE}, offset 0 or more")
        store = self.store
        await store.flushed()  # rows are written behind: the list shows every call counted so far
        try:
            page, total = await store.run(store.list_sessions, principal, flags["implicit"], flags["terminated"],
                                          limit, offset)
        except StoreUnavailable as exc:
            return _unavailable(exc)
        return JSONResponse({"sessions": [s.to_dict() for s in page], "total": total, "offset": offset,
                             "limit": limit})

    async def _named(self, request: Request) -> SessionState | JSONResponse:
        try:
            found = await self.store.find_session(request.path_params["principal"],
                                                  request.path_params["session_id"])
        except StoreUnavailable as exc:
            return _unavailable(exc)
        return _not_found() if found is None else found

    async def show(self, request: Request) -> JSONResponse:
        """GET /v1/admin/sessions/{principal}/{session_id}: one run."""
        if _admin(request) is None:
            return _forbidden()
        found = await self._named(request)
        return found if isinstance(found, JSONResponse) else JSONResponse(found.to_dict())

    def _audited(self, who: str, action: str, state: SessionState, **extra: Any) -> JSONResponse | None:
        """Write the ``session.admin`` event; a 503 response when it cannot be written."""
        try:
            self.gateway.record("session.admin", action=action, admin=who, principal={"id": state.principal},
                                session=state.id, implicit=state.implicit, before=state.to_dict(),
                                revision=self.gateway.revision, **extra)
        except AuditWriteError:
            return error_response(503, "audit-failed", "The change could not be recorded, so it was not made.")
        return None

    async def reset(self, request: Request) -> JSONResponse:
        """POST .../reset: counters to zero, no labels, tallies or history, not terminated (the store clears them)."""
        who = _admin(request)
        if who is None:
            return _forbidden()
        body = await read_json_object(request)  # an empty object: reset takes no options
        if isinstance(body, JSONResponse):
            return body
        found = await self._named(request)
        if isinstance(found, JSONResponse):
            return found
        refused = self._audited(who, "reset", found)
        if refused is not None:
            return refused
        self.store.reset(found)
        await self.store.settle()
        return JSONResponse(found.to_dict())

    async def end(self, request: Request) -> JSONResponse:
        """POST .../end {message?}: terminated with the message."""
        who = _admin(request)
        if who is None:
            return _forbidden()
        body = await read_json_object(request)
        if isinstance(body, JSONResponse):
            return body
        message = body.get("message") or ENDED_BY_ADMIN
        if not isinstance(message, str):
            return error_response(400, "invalid-message", "message must be a string")
        found = await self._named(request)
        if isinstance(found, JSONResponse):
            return found
        refused = self._audited(who, "end", found, message=message)
        if refused is not None:
            return refused
        self.store.end(found, message)
        await self.store.settle()
        return JSONResponse(found.to_dict())
