"""An upstream's requests to a 2026-07-28 client, which has no stream to be asked on during a call: the
multi-round-trip flow (``InputRequiredResult``).

The call runs on in the background. When its upstream asks the client something, ``tools/call`` answers
``InputRequiredResult``: the question, and a ``requestState`` naming the waiting call. The client retries the
same call with its answers and that state; they go to the waiting upstream, and the retry answers with the
next question or the call's outcome. A ``requestState`` is a random key, good once, only for the principal and
the tool call (name and arguments) it was issued for; the policy decided the call once, on its first leg.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from gateway.core.limits import MAX_PENDING_ROUND_TRIPS, ROUND_TRIP_RESULT_SECONDS
from gateway.frontends.mcp.client_channel import McpClientChannel, request_of
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.upstreams.client_requests import ClientRequestKind

__all__ = ["InputRequired", "RoundTrips"]


class InputRequired(Exception):
    """The call's answer for now: questions for the client, to be answered by retrying the call."""

    def __init__(self, result: types.InputRequiredResult) -> None:
        super().__init__("input required")
        self.result = result


@dataclass(slots=True)
class _Question:
    request: types.InputRequest
    result_type: type[BaseModel]
    answer: asyncio.Future[BaseModel] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    key: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass(slots=True)
class _Suspended:
    principal: str
    tool: str
    arguments: dict[str, Any]
    questions: asyncio.Queue[_Question] = field(default_factory=asyncio.Queue)
    open: dict[str, _Question] = field(default_factory=dict)
    task: asyncio.Future[CallOutcome] | None = None
    state: str | None = None


class _RoundTripChannel(McpClientChannel):
    """The client of a 2026-07-28 call: asked through the call's own answers."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], log_levels: frozenset[str], call: _Suspended) -> None:
        super().__init__(ctx, log_levels)
        self._call = call

    def reachable(self) -> bool:
        return True

    async def ask(self, kind: ClientRequestKind, params: Any) -> BaseModel:
        request, result_type = request_of(kind, params)
        question = _Question(request, result_type)
        self._call.open[question.key] = question
        await self._call.questions.put(question)
        try:
            return await question.answer
        finally:
            self._call.open.pop(question.key, None)


class RoundTrips:
    """The calls of 2026-07-28 clients that wait on their client's answers, by ``requestState``."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[str, _Suspended] = OrderedDict()

    async def call(self, run: Callable[[CallRequest], Awaitable[CallOutcome]], request: CallRequest,
                   ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams,
                   log_levels: frozenset[str]) -> CallOutcome:
        """Run the call (or go on with the one ``params.request_state`` names); raises ``InputRequired``."""
        if params.request_state is not None:
            return await self._resume(request, params)
        if ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS or ctx.session.can_send_request:
            return await run(request)  # the client can be asked on the call's stream
        call = _Suspended(request.principal.key, request.tool, dict(request.arguments))
        request.client = _RoundTripChannel(ctx, log_levels, call)
        call.task = asyncio.ensure_future(run(request))
        call.task.add_done_callback(lambda _: self._forget(call))
        return await self._next(call)

    async def _resume(self, request: CallRequest, params: types.CallToolRequestParams) -> CallOutcome:
        state = params.request_state or ""
        call = self._waiting.get(state)
        if call is None or (call.principal, call.tool, call.arguments) != (
                request.principal.key, request.tool, request.arguments):  # and a mismatch does not spend it
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid or expired requestState")
        del self._waiting[state]
        call.state = None
        for key, answer in (params.input_responses or {}).items():
            question = call.open.get(key)
            if question is None or question.answer.done():
                continue
            try:
                question.answer.set_result(question.result_type.model_validate(
                    answer.model_dump(by_alias=True, mode="json", exclude_none=True)))
            except ValidationError:
                question.answer.set_exception(MCPError(code=types.INVALID_PARAMS,
                                                       message="the client's answer does not fit the request"))
        for question in list(call.open.values()):  # not answered this time: asked again
            if not question.answer.done():
                call.questions.put_nowait(question)
        return await self._next(call)

    async def _next(self, call: _Suspended) -> CallOutcome:
        """The call's outcome, or (raised) the questions it is waiting on."""
        assert call.task is not None
        asked = asyncio.ensure_future(call.questions.get())
        try:
            waits: set[asyncio.Future[Any]] = {call.task, asked}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the client gave up on the call: so does the gateway
            call.task.cancel()
            raise
        finally:
            if not asked.done():
                asked.cancel()
        if call.task.done() or not asked.done() or asked.cancelled():
            if asked.done() and not asked.cancelled():
                call.questions.put_nowait(asked.result())
            return await call.task
        questions = [asked.result()]
        while not call.questions.empty():
            questions.append(call.questions.get_nowait())
        state = secrets.token_urlsafe(24)
        call.state = state
        self._waiting[state] = call
        while len(self._waiting) > MAX_PENDING_ROUND_TRIPS:  # the oldest waits out its call's timeout unasked
            self._waiting.popitem(last=False)
        raise InputRequired(types.InputRequiredResult(
            input_requests={q.key: q.request for q in questions if not q.answer.done()}, request_state=state))

    def _forget(self, call: _Suspended) -> None:
        """The call is over. One whose client is being asked stays resumable for ROUND_TRIP_RESULT_SECONDS: the
        client's next request (the answers, with the state it was given) gets the call's outcome, not "expired"
        (the upstream may finish without the answers: it gave up waiting, or did not need them)."""
        state = call.state
        if state is None:
            return

        def drop() -> None:
            if self._waiting.get(state) is call:
                del self._waiting[state]

        asyncio.get_running_loop().call_later(ROUND_TRIP_RESULT_SECONDS, drop)
