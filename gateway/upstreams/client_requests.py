"""What an MCP upstream asks of its client (sampling, elicitation, roots) and the log messages it sends,
relayed to the one client whose call it is running.

One upstream connection serves every caller. When the SDK runs a callback in the context of the call it
belongs to, the caller is known exactly: at 2026-07-28 the client answers the server's ``InputRequiredResult``
rounds inside ``call_tool`` itself, and over streamable HTTP what arrives on a call's own response stream is
handled in that call's context. Otherwise (a handshake-era request over stdio names no call it belongs to) a
request is attributed to a caller only when exactly one call is in flight on that upstream: with none, or with
several, it is refused (a log message is not relayed), never guessed. The caller's frontend gives a
``ClientChannel``: what its client declared, and the way to ask it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import mcp_types as types
from mcp import MCPError
from mcp.client.session import ClientRequestContext
from pydantic import BaseModel

from gateway.core.globs import glob_match

__all__ = ["KINDS", "ClientChannel", "ClientRequestKind", "ClientRequestRouter", "ClientRequestRules",
           "Declares", "calling_client", "declares_kind", "undeclared"]

log = logging.getLogger("gateway.upstreams.client_requests")

ClientRequestKind = Literal["sampling", "elicitation", "roots"]
KINDS: tuple[ClientRequestKind, ...] = ("sampling", "elicitation", "roots")

_METHODS: dict[ClientRequestKind, str] = {"sampling": "sampling/createMessage", "elicitation": "elicitation/create",
                                          "roots": "roots/list"}


class ClientChannel(Protocol):
    """A frontend's way back to the client whose call is running."""

    def declares(self, kind: ClientRequestKind, params: Any) -> bool:
        """Whether the client declared what answering this request needs (and can be asked at all)."""
        ...

    async def ask(self, kind: ClientRequestKind, params: Any) -> BaseModel:
        """The client's answer; ``MCPError`` when it refuses or cannot be reached."""
        ...

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Relay a log message, if the client asked for messages at its level."""
        ...

    def log_level(self) -> types.LoggingLevel | None:
        """The least severe level the client asked log messages for (None: none)."""
        ...


# The client of the call the current task is running, set by the pipeline around an upstream call.
_calling: contextvars.ContextVar[ClientChannel | None] = contextvars.ContextVar("gateway_calling_client",
                                                                                default=None)
# The upstream call the current context is running (set by ``ClientRequestRouter.running``).
_running: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("gateway_running_call", default=None)


@contextlib.contextmanager
def calling_client(channel: ClientChannel | None) -> Iterator[None]:
    """Run an upstream call on behalf of ``channel``'s client (None: a caller that cannot be asked)."""
    token = _calling.set(channel)
    try:
        yield
    finally:
        _calling.reset(token)


@dataclass(frozen=True, slots=True)
class ClientRequestRules:
    """Which requests an upstream may send its callers' clients (config: ``mcp.client_requests``)."""

    sampling: bool = True
    elicitation: bool = True
    roots: bool = True
    # (glob over the upstream's tool names, the kinds those tools ask the client): ``mcp.tools_need_client``
    needs: tuple[tuple[str, frozenset[ClientRequestKind]], ...] = ()

    def allows(self, kind: ClientRequestKind) -> bool:
        """Whether requests of this kind are relayed at all."""
        return bool(getattr(self, kind))

    def needed_by(self, tool: str) -> frozenset[ClientRequestKind]:
        """The kinds of request the upstream's tool ``tool`` asks its caller's client (every matching glob's)."""
        return frozenset(kind for pattern, kinds in self.needs if glob_match(tool, pattern) for kind in kinds)


@dataclass(slots=True)
class _Call:
    channel: ClientChannel | None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


# The least demanding request of each kind (no tools, no context; form and URL elicitation): a client that
# declares none of these declares nothing a request of that kind could need.
_PROBES: tuple[tuple[ClientRequestKind, Any], ...] = (
    ("sampling", types.CreateMessageRequestParams(messages=[], max_tokens=1)),
    ("elicitation", types.ElicitRequestFormParams(message="", requested_schema={"type": "object", "properties": {}})),
    ("elicitation", types.ElicitRequestURLParams(message="", url="https://example.invalid/", elicitation_id="x")),
    ("roots", None),
)


Declares = Callable[[ClientRequestKind, Any], bool]  # a client's ``ClientChannel.declares``


def declares_kind(declares: Declares, kind: ClientRequestKind) -> bool:
    """Whether a client's ``declares`` covers some request of ``kind`` (its least demanding forms)."""
    return any(declares(k, params) for k, params in _PROBES if k == kind)


def undeclared(declares: Declares | None, kinds: Iterable[str]) -> list[str]:
    """Those of ``kinds`` the caller's client cannot be asked (every one, for a caller that cannot be asked)."""
    return sorted(k for k in kinds if declares is None or k not in KINDS or not declares_kind(declares, k))


class ClientRequestRouter:
    """One upstream's calls in flight, and the SDK client callbacks that answer its requests through them."""

    def __init__(self, upstream: str, rules: ClientRequestRules) -> None:
        self.upstream = upstream
        self.rules = rules
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count()
        # At 2026-07-28 a server asks only inside a request (InputRequiredResult), so a request outside any
        # call's context is a resources/read's or prompts/get's, never a call's: set per connection.
        self.inside_calls_only = False

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark a call in flight (from before it is sent until its result is in) for the current task's client."""
        key = next(self._ids)
        call = _Call(_calling.get())
        self._calls[key] = call
        token = _running.set(call)
        try:
            yield
        finally:
            _running.reset(token)
            del self._calls[key]
            call.ended.set()  # whatever its client is still being asked is withdrawn

    def client_options(self) -> dict[str, Any]:
        """The ``mcp.Client`` callbacks: one per allowed kind, so the upstream sees exactly those capabilities."""
        options: dict[str, Any] = {"logging_callback": self._log}
        if self.rules.sampling:
            options["sampling_callback"] = self._sampling
            # Declared so tool-using sampling can be relayed; each request is checked against its client.
            options["sampling_capabilities"] = types.SamplingCapability(tools=types.SamplingToolsCapability())
        if self.rules.elicitation:
            options["elicitation_callback"] = self._elicitation
        if self.rules.roots:
            options["list_roots_callback"] = self._roots
        return options

    async def _sampling(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        return await self._forward("sampling", params)

    async def _elicitation(self, ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        return await self._forward("elicitation", params)

    async def _roots(self, ctx: ClientRequestContext) -> Any:
        return await self._forward("roots", None)

    def log_level(self) -> types.LoggingLevel | None:
        """The log level the current task's client asked for, to send upstream with its call (2026-07-28)."""
        channel = _calling.get()
        return channel.log_level() if channel is not None else None

    def quiet(self) -> bool:
        """Whether nothing but its result can reach the current task's client from its call: no log level
        asked, and no kind of request this upstream may send that its client declared (so every one is refused)."""
        channel = _calling.get()
        if channel is None:
            return True
        if channel.log_level() is not None:
            return False
        return not any(self.rules.allows(kind) and declares_kind(channel.declares, kind) for kind in KINDS)

    def _owner(self) -> tuple[_Call | None, str]:
        """The call a callback belongs to, or why there is none to attribute a request to."""
        here = _running.get()
        if here is not None and any(call is here for call in self._calls.values()):
            return here, ""  # run in the call's own context: exact
        if here is not None and here.ended.is_set():
            return None, "its call has ended"
        if not self._calls:
            return None, "no call is in flight on this upstream"
        if len(self._calls) > 1:
            return None, "several calls are in flight on this upstream, so the caller is unknown"
        return next(iter(self._calls.values())), ""

    async def _forward(self, kind: ClientRequestKind, params: Any) -> BaseModel | types.ErrorData:
        method = _METHODS[kind]
        if self.inside_calls_only and _running.get() is None:
            return self._refuse(method, "only a tool call's questions are relayed")
        call, why = self._owner()
        if call is None:
            return self._refuse(method, why)
        channel = call.channel
        if channel is None or not channel.declares(kind, params):
            return self._refuse(method, f"the calling client did not declare what {method} needs")
        asking = asyncio.ensure_future(channel.ask(kind, params))
        ended = asyncio.ensure_future(call.ended.wait())
        try:
            await asyncio.wait({asking, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not asking.done():
                asking.cancel()
        if asking.cancelled() or not asking.done():
            return self._refuse(method, "the call ended before its client answered")
        exc = asking.exception()
        if isinstance(exc, MCPError):  # the client's own refusal (a declined sampling, say) goes back as it is
            log.info("upstream %s: %s refused by the client: %s", self.upstream, method, exc)
            return exc.error
        if exc is not None:
            log.info("upstream %s: %s could not reach the client: %s", self.upstream, method, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message="the client could not be asked")
        log.info("upstream %s: %s relayed to its caller's client", self.upstream, method)
        return asking.result()

    def _refuse(self, method: str, why: str) -> types.ErrorData:
        log.info("upstream %s: %s refused: %s", self.upstream, method, why)
        return types.ErrorData(code=types.INVALID_REQUEST, message=f"{method} refused by the gateway: {why}")

    async def _log(self, params: types.LoggingMessageNotificationParams) -> None:
        call, why = self._owner()
        if call is None or call.channel is None:
            # Not attributable to one caller: kept out of every client's view, in the gateway's own log.
            log.debug("upstream %s: log message (%s) not relayed: %s", self.upstream, params.level,
                      why or "its caller cannot receive log messages")
            return
        try:
            await call.channel.log(params)
        except Exception as exc:  # the client went away: the call itself goes on
            log.info("upstream %s: log message not relayed: %s", self.upstream, exc)

