"""Elicitation approvals for 2026-07-28 clients, through input-required results (MCP multi round-trip requests).

2026-07-28 has no server-to-client requests: a server that needs the user asks by answering the ``tools/call``
with an ``InputRequiredResult`` whose ``inputRequests`` hold an ``elicitation/create``; the client asks its user
and sends the call again with the answer in ``inputResponses``. The gateway does this for a held call whose
rule says ``via: elicitation``, only for a client that declared elicitation in the request's capabilities
(the spec forbids it otherwise; the SDK's ``Client`` drives the rounds, ``ClientSession.call_tool`` alone
would raise).

The second call is the same call again: it binds to the pending approval by (principal, run, tool, final
arguments) like any retry, and the answer counts as the end user's vote. The answer's key is a digest of the
question, which names the tool and the arguments, so an answer is taken only for the question it answers.
No ``requestState`` is sent: nothing the client sends back is trusted beyond that answer.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.request import CallOutcome

__all__ = ["InputRound", "input_round"]

_ELICIT = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_SCHEMA = {"type": "object", "properties": {"approve": {"type": "boolean", "title": "Approve this call?",
                                                        "default": True}}}


def input_round(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> InputRound | None:
    """The input-required round of a 2026-07-28 call whose client declared elicitation, else None."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return None
    try:
        declared = ctx.session.check_client_capability(_ELICIT)
    except Exception:  # no capabilities in this request: nothing may be asked
        return None
    return InputRound(params.input_responses or {}) if declared else None


class InputRound:
    """One tools/call: answers the approval's question from ``inputResponses``, or asks for them."""

    def __init__(self, responses: types.InputResponses) -> None:
        self.responses = responses
        self._asked: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

    async def ask(self, message: str) -> bool | None:
        """The end user's answer when this call carries it; else the call is answered "input required"."""
        key = _key(message)
        answer = self.responses.get(key)
        if isinstance(answer, types.ElicitResult):
            if answer.action == "cancel":
                return None  # dismissed: the call waits for an approver instead
            return answer.action == "accept" and bool((answer.content or {}).get("approve", True))
        if not self._asked.done():
            self._asked.set_result((key, message))
        await asyncio.Future()  # until the frontend ends this call to ask
        return None

    async def run(self, gateway: Gateway, request: CallRequest) -> CallOutcome | types.InputRequiredResult:
        """The call's outcome, or the input-required result that asks the end user."""
        request.elicit = self.ask
        call = asyncio.ensure_future(gateway.call(request))
        waits: set[asyncio.Future[Any]] = {call, self._asked}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if call.done() or not self._asked.done():
            return await call
        # Stop holding: the approval request stays, and the call with the answer binds to it.
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        key, message = self._asked.result()
        question = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message,
                                                                             requested_schema=_SCHEMA))
        return types.InputRequiredResult(input_requests={key: question})


def _key(message: str) -> str:
    return "gateway-approval-" + hashlib.sha256(message.encode()).hexdigest()[:32]
