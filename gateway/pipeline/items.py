"""Resource reads, prompt gets and resource subscriptions: decision points, like tool calls.

    the URI the upstream will read (normalised; refused when it has two readings) → hidden for the
    principal? (answered exactly like an unknown item) → request-stage policies (rules naming
    ``resources:`` or ``prompts:``, and the set's default) → the owning upstream, sent that URI →
    audit event → the client

Hidden is the rule tools follow: an enforced rule that refuses whatever the request (it reads only
``principal``, ``env`` and the item) hides the item from lists, and a request for it by URI or name
gets the same error as one for an item that does not exist, so an error is no oracle. For the same
reason a subscription is only to a listed resource (the upstream's answer for a URI it does not
know differs between servers), and an unsubscribe is never refused.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import mcp_types as types

from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.core.errors import (
    AuditWriteError,
    ItemNotFound,
    ItemRefusedError,
    UnclearUriError,
    UnknownItemError,
    UpstreamError,
)
from gateway.core.limits import MAX_AUDIT_ERROR_CHARS
from gateway.observe.tracing import current_trace_id
from gateway.pipeline.lifecycle import Gateway
from gateway.policy.call import CallInfo, Principal, ToolCall, ToolInfo
from gateway.policy.decision import Decision, Stage, Verdict
from gateway.upstreams.items import ExposedItem, ItemCatalog

__all__ = ["ItemGate", "ItemRequest"]

log = logging.getLogger("gateway.pipeline.items")

FAILED = "The {kind} could not be {done}: its server failed. Try again later."
NOT_RECORDED = "The request could not be recorded, so it was refused."
_DONE = {"resources/read": "read", "prompts/get": "got", "resources/subscribe": "subscribed to"}
_NO_TOOL = ToolInfo(name="")


@dataclass(frozen=True, slots=True)
class ItemRequest:
    """One read, get or subscription as a frontend received it."""

    method: str  # resources/read, resources/subscribe or prompts/get
    name: str  # the gateway URI or the exposed prompt name
    principal: Principal
    arguments: dict[str, str] | None = None  # a prompt's arguments
    frontend: str = "mcp"

    @property
    def kind(self) -> str:
        """``resource`` or ``prompt``."""
        return "prompt" if self.method == "prompts/get" else "resource"


class ItemGate:
    """Lists what a principal may see; decides, runs and records reads, gets and subscriptions."""

    def __init__(self, gateway: Gateway, catalog: ItemCatalog) -> None:
        self.gateway = gateway
        self.catalog = catalog

    def visible(self, principal: Principal, items: list[ExposedItem]) -> list[ExposedItem]:
        """The items the policies do not refuse this principal whatever the request."""
        policy_set = self.gateway.policies.current
        return [i for i in items
                if policy_set.admits_tool(ToolCall(_NO_TOOL, principal=principal, env=self.gateway.env, item=i.info))]

    async def read(self, request: ItemRequest) -> types.ReadResourceResult:
        """``resources/read``: the upstream's contents under the gateway's URIs."""
        item, trace = self._admitted(request)
        upstream_uri = item.info.upstream_name
        result = await self._run(trace, item, lambda timeout: item.owner.read(upstream_uri, timeout))
        assert isinstance(result, types.ReadResourceResult)
        prefix = item.info.name[:len(item.info.name) - len(upstream_uri)]
        for content in result.contents:  # what the upstream names by its URI, the client knows by the gateway's
            content.uri = prefix + content.uri
        return result

    async def get(self, request: ItemRequest) -> types.GetPromptResult:
        """``prompts/get``: the upstream's prompt, with the arguments as given."""
        item, trace = self._admitted(request)
        name, arguments = item.info.upstream_name, dict(request.arguments or {})
        result = await self._run(trace, item, lambda timeout: item.owner.get(name, arguments, timeout))
        assert isinstance(result, types.GetPromptResult)
        return result

    async def subscribe(self, request: ItemRequest) -> ExposedItem:
        """``resources/subscribe``, decided like a read, of a resource the upstream lists (and the caller sees).

        Anything else is answered as unknown without asking the upstream, whose answer for a URI it
        does not know would otherwise tell it apart from a hidden one.
        """
        item, trace = self._admitted(request)
        uri = item.info.upstream_name
        await self._run(trace, item, lambda timeout: item.owner.subscribe(uri, timeout))
        return item

    def subscription(self, uri: str) -> ExposedItem | None:
        """The listed resource a gateway ``uri`` names, for an unsubscribe (never refused, never audited)."""
        try:
            item = self.catalog.resource(uri)
        except UnclearUriError:
            return None
        return item if item is not None and item.listed else None

    async def unsubscribe(self, item: ExposedItem) -> None:
        """Tell the upstream nobody here follows ``item`` any more (its failure is only logged)."""
        try:
            await item.owner.subscribe(item.info.upstream_name, self.gateway.call_timeout, on=False)
        except UpstreamError as exc:  # the client is unsubscribed here whatever the upstream says
            log.info("unsubscribe from a resource of upstream %s failed (%s)", item.info.upstream,
                     type(exc).__name__)  # no URI nor the upstream's text: a URI holds values

    def _known(self, request: ItemRequest) -> ExposedItem:
        """The item asked for, when it exists for this caller; ``UnclearUriError`` when its URI has two readings."""
        item = self.catalog.resource(request.name) if request.kind == "resource" else self.catalog.prompt(request.name)
        if (item is None or (request.method == "resources/subscribe" and not item.listed)
                or not self.visible(request.principal, [item])):
            raise UnknownItemError(request.kind, request.name)
        return item

    def _admitted(self, request: ItemRequest) -> tuple[ExposedItem, _Trace]:
        """The item, when it exists, is visible to the principal and the policies allow this request."""
        trace = _Trace(request)
        try:
            item = self._known(request)
        except UnknownItemError:
            self._record(trace, None, None, "unknown", "unknown")
            raise
        except UnclearUriError as exc:  # refused before anything is decided: there is no one URI to decide on
            self._record(trace, None, str(exc), "reject", "not_called")
            raise
        if item.refused is not None:  # drifted from the tools lock, `on_drift: reject`
            self._record(trace, item, item.refused, "item_drifted", "not_called")
            raise ItemRefusedError(item.refused)
        info = replace(item.info, method=request.method) if request.method == "resources/subscribe" else item.info
        # A prompt's arguments, or the variables of the template a resource's URI fits: what is read.
        args: dict[str, Any] = dict(request.arguments or {}) if request.kind == "prompt" else dict(item.variables)
        call = ToolCall(_NO_TOOL, args=args, principal=request.principal,
                        call=CallInfo(trace.audit_id, 0, now_rfc3339()), env=self.gateway.env, item=info)
        policy_set = self.gateway.policies.current
        try:
            decision = policy_set.decide(call)
        except Exception:  # the engine should never raise; if it does, fail closed
            log.exception("policy evaluation raised for %s (audit event %s)", request.method, trace.audit_id)
            decision = Decision(Verdict.REJECT, Stage.REQUEST, call.args, call.args, policy_set.revision,
                                "The policies could not be evaluated for this request, so it was refused.",
                                "engine-error")
        if decision.decided_by == "default" and decision.verdict is Verdict.REJECT:
            decision = replace(decision, message=f"No policy allows this {request.kind} request: {request.name}.")
        trace.decision, trace.arguments = decision, args
        if decision.verdict is not Verdict.ALLOW:
            message = decision.message or "This request was refused by policy."
            self._record(trace, item, message, str(decision.verdict), "not_called")
            raise ItemRefusedError(message)
        return item, trace

    async def _run(self, trace: _Trace, item: ExposedItem, send: Any) -> Any:
        request = trace.request
        started = time.perf_counter()
        try:
            result = await send(self.gateway.call_timeout)
        except ItemNotFound:
            trace.upstream_ms = (time.perf_counter() - started) * 1e3
            self._record(trace, item, "unknown at the upstream", "allow", "not_found")
            raise UnknownItemError(request.kind, request.name) from None
        except UpstreamError as exc:
            trace.upstream_ms = (time.perf_counter() - started) * 1e3
            # neither the URI nor the upstream's text (it quotes the URI): template variables hold values
            log.warning("%s failed at upstream %s (%s); audit event %s has the details", request.method,
                        item.info.upstream, type(exc).__name__, trace.audit_id)
            message = FAILED.format(kind=request.kind, done=_DONE[request.method])
            trace.error = str(exc)[:MAX_AUDIT_ERROR_CHARS]  # the details, for operators only
            self._record(trace, item, message, "allow", "error")
            raise ItemRefusedError(message) from None
        trace.upstream_ms = (time.perf_counter() - started) * 1e3
        try:
            self._record(trace, item, None, "allow", "ok", strict=True)
        except AuditWriteError:
            raise ItemRefusedError(NOT_RECORDED) from None
        return result

    def _record(self, trace: _Trace, item: ExposedItem | None, message: str | None, verdict: str, status: str,
                *, strict: bool = False) -> None:
        """The audit event; a refusal is refused whether or not it is recorded, a result only if it is."""
        request, decision = trace.request, trace.decision
        arguments, redacted = self.gateway.audit.redactor.apply(trace.arguments, "/arguments")
        event = {
            **audit_head(f"{request.kind}.{'subscribe' if request.method == 'resources/subscribe' else 'outcome'}",
                         now_rfc3339(), current_trace_id(), trace.audit_id),
            "frontend": request.frontend,
            "principal": request.principal.to_record(),
            "method": request.method,
            "kind": request.kind,
            "name": request.name,
            "upstream": item.info.upstream if item is not None else None,
            "upstream_name": item.info.upstream_name if item is not None else None,
            "arguments": arguments,
            "verdict": verdict,
            "message": message,
            "rules": [r.to_dict() for r in decision.rules] if decision is not None else [],
            "decided_by": [decision.decided_by] if decision is not None and decision.decided_by else [],
            "upstream_outcome": {"status": status, **({"error": trace.error} if trace.error else {})},
            "latency": {
                "policy_us": round(decision.elapsed_us, 1) if decision is not None else 0.0,
                "upstream_ms": round(trace.upstream_ms, 3) if trace.upstream_ms is not None else None,
                "total_ms": round((time.perf_counter() - trace.started) * 1e3, 3),
            },
            "revision": self.gateway.revision,
            "redacted": redacted,
        }
        try:
            self.gateway.audit.write(event)
        except AuditWriteError:
            log.error("the audit event %s of %s could not be written", trace.audit_id, request.method)
            if strict:
                raise


@dataclass(slots=True)
class _Trace:
    request: ItemRequest
    audit_id: str = ""
    started: float = 0.0
    decision: Decision | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the upstream's failure
    upstream_ms: float | None = None

    def __post_init__(self) -> None:
        self.audit_id = uuid.uuid4().hex
        self.started = time.perf_counter()
