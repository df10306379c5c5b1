"""The model proxy's loop: ask the model, decide every tool call it makes, resolve what the agent must not see.

    agent request (read by its API's dialect, gateway/models/dialects/) → put back earlier resolved exchanges
    (splices.py) → (run terminated? answer so, no model call) → the results of the agent's own tools through
    the response stage (the model reads them as the rules leave them; a terminate ends the run, answered so)
    → ask the model → every tool call decided (turn.py) → admitted agent-run calls go back to the agent;
    when every call was answered here, the model is asked again (at most ``max_turns`` times); terminate, a
    pending approval and an approved call already handed out end the response with a message.

Both the whole response (``complete``) and the streamed one (``stream``) run the same ``decide_answer``;
the dialect reads every answer and writes every response, so the loop is the same for every model API.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence

from gateway.core.errors import ModelUpstreamError
from gateway.core.globs import glob_match
from gateway.core.limits import MODEL_SPLICES_KEPT
from gateway.models.client_tools import undeclared_tools
from gateway.models.conversation import Caller, Conversation, ModelRoute, UnknownModel, WrongApi
from gateway.models.dialects.base import Dialect, HandedOut, Json, ModelAnswer, Reply, RequestProblem
from gateway.models.splices import Handed, Splices
from gateway.models.turn import Decided, decide_answer
from gateway.pipeline import Gateway
from gateway.pipeline.agent_results import AgentResults

__all__ = ["Caller", "ModelProxy", "ModelRoute", "RequestProblem", "UnknownModel", "WrongApi"]

log = logging.getLogger("gateway.models.proxy")

TURNS_EXHAUSTED = ("The gateway stopped asking the model after {n} requests: its tool calls kept being answered by "
                   "the gateway. Try again with a different request.")


class ModelProxy:
    """Serves the model APIs for the configured model routes through one pipeline."""

    def __init__(self, gateway: Gateway, routes: Sequence[ModelRoute]) -> None:
        self.gateway = gateway
        self.routes = list(routes)
        self.splices = Splices(MODEL_SPLICES_KEPT)
        self.handed = Handed(MODEL_SPLICES_KEPT)
        self.results = AgentResults(gateway)

    async def close(self) -> None:
        """Close every model upstream's connections."""
        for route in self.routes:
            await route.upstream.close()

    def _start(self, dialect: Dialect, body: Json, caller: Caller, headers: Mapping[str, str]) -> Conversation:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestProblem("'model' must be a model name")
        route = next((r for r in self.routes if glob_match(model, r.name)), None)
        if route is None:
            raise UnknownModel(model)
        if route.api != dialect.api:
            raise WrongApi(route.name, route.api)
        request = dialect.read_request(body, headers)
        undeclared = undeclared_tools(request.tools, route.client_tools)
        if undeclared:
            raise RequestProblem(f"the agent's tools {', '.join(map(repr, undeclared))} are not among this model's"
                                 " client_tools in the gateway's configuration")
        gateway = {t.name: t for t in self.gateway.usable_tools(caller.principal, None)  # no client to ask
                   if t.name not in request.tools and any(glob_match(t.name, g) for g in route.gateway_tools)
                   } if route.gateway_tools else {}
        base = dialect.offer(request, route.model or model, list(gateway.values()))
        items = self.splices.expand(caller.principal.key, caller.run.id, request.conversation, dialect.call_ids)
        return Conversation(caller, route, dialect, request, base, items, gateway)

    async def _opening(self, conversation: Conversation) -> str | None:
        """What the agent reads instead of an answer when the run was terminated, or a result it sent back ends the
        run (then the model is not asked); else None, with the agent's results screened."""
        caller, dialect = conversation.caller, conversation.dialect
        ended = await self.gateway.run_ended(caller.principal.key, caller.run, "This run was terminated.")
        found = [] if ended is not None else dialect.agent_results(
            conversation.items, conversation.request.conversation, conversation.client,
            self.handed.lookup(caller.principal.key, caller.run.id))
        if not found:
            return ended
        screened = await self.results.screen(caller.principal, caller.run, [result for _, result in found])
        conversation.items = dialect.with_screened(conversation.items, found, screened)
        conversation.results = [entry.report() for entry in screened if entry.checked]
        return next((entry.ended for entry in screened if entry.ended is not None), None)

    async def _decided(self, conversation: Conversation, answer: ModelAnswer) -> Reply | None:
        """The agent's reply once ``answer`` is decided, or None: the model is asked again."""
        conversation.model_requests += 1
        conversation.usage = conversation.dialect.add_usage(conversation.usage, answer.usage)
        if not answer.calls:
            return conversation.reply(answer)
        decided: Decided = await decide_answer(self.gateway, conversation, answer)
        if decided.returned:
            self._keep(conversation, decided)
        return conversation.reply(answer, decided.returned, decided.text, decided.answered) if decided.final else None

    def _keep(self, conversation: Conversation, decided: Decided) -> None:
        """Remember what the agent does not see, and the calls it was given."""
        principal, run = conversation.caller.principal.key, conversation.caller.run.id
        self.splices.keep(principal, run, decided.returned[0][0].id, conversation.resolved)
        for call, arguments in decided.returned:
            self.handed.keep(principal, run, call.id, HandedOut(call.name, arguments, decided.iteration))

    def _exhausted(self, conversation: Conversation, answer: ModelAnswer | None) -> Reply:
        return conversation.reply(answer, text=TURNS_EXHAUSTED.format(n=conversation.route.max_turns))

    async def complete(self, dialect: Dialect, body: Json, caller: Caller,
                       headers: Mapping[str, str] | None = None) -> Json:
        """The agent's whole response."""
        conversation = self._start(dialect, body, caller, headers or {})
        ended = await self._opening(conversation)
        if ended is not None:
            return dialect.whole(conversation.reply(None, text=ended))
        upstream = conversation.route.upstream
        passed = dialect.passed_headers(conversation.request.headers)
        answer: ModelAnswer | None = None
        for _ in range(conversation.route.max_turns):
            answer = dialect.read_answer(await upstream.complete(conversation.next_request(), passed))
            reply = await self._decided(conversation, answer)
            if reply is not None:
                return dialect.whole(reply)
        return dialect.whole(self._exhausted(conversation, answer))

    async def stream(self, dialect: Dialect, body: Json, caller: Caller,
                     headers: Mapping[str, str] | None = None) -> AsyncIterator[bytes]:
        """The response as Server-Sent Events: text at once, tool calls once decided. An upstream failing before
        the first event raises (the endpoint answers with its status); after, the stream ends with an error event."""
        conversation = self._start(dialect, body, caller, headers or {})
        writer = dialect.stream(conversation.request)
        ended = await self._opening(conversation)
        if ended is not None:
            for event in writer.close(conversation.reply(None, text=ended)):
                yield event
            return
        upstream = conversation.route.upstream
        passed = dialect.passed_headers(conversation.request.headers)
        answer: ModelAnswer | None = None
        started = False
        try:
            for _ in range(conversation.route.max_turns):
                writer.turn()
                async for chunk in upstream.stream(conversation.next_request(), passed):
                    for out in writer.add(chunk):
                        started = True
                        yield out
                answer = writer.answer()
                reply = await self._decided(conversation, answer)
                if reply is not None:
                    break
            else:
                reply = self._exhausted(conversation, answer)
        except ModelUpstreamError as exc:
            if not started:
                raise
            log.warning("a streamed model response ended early: %s", exc)
            yield writer.error(exc.code, str(exc))
            return
        for event in writer.close(reply):
            yield event
