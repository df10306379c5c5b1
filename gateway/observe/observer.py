"""The pipeline's one seam to metrics and traces: a few calls from gateway/pipeline/lifecycle.py.

Each method does its metrics part when metrics are on and its tracing part when tracing is on; with
both off (``CallObserver()``) each is a branch or two. Nothing here decides anything: the policy engine
stays pure, and what is observed is what the pipeline already computed (a decision's own timing, the
outcome the caller got).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from opentelemetry.trace import SpanKind

from gateway.core.errors import InvalidArgumentsError, UnknownToolError, UpstreamError, UpstreamNotReached
from gateway.observe.metrics import Metrics
from gateway.observe.tracing import Tracing, current_span, failed
from gateway.policy.decision import Decision, Stage

__all__ = ["CallObserver"]

_STAGE_SPANS = {Stage.REQUEST: "gateway.decide", Stage.RESPONSE: "gateway.response_policies"}


class _Request(Protocol):
    tool: str
    session_id: str
    call_id: str
    frontend: str
    traceparent: str | None

    @property
    def principal(self) -> Any: ...


class _Outcome(Protocol):
    decision: str


class _Registry(Protocol):
    def get(self, name: str) -> Any: ...


class _Result(Protocol):
    is_error: bool


class _Approval(Protocol):
    @property
    def approved(self) -> bool: ...
    @property
    def pending(self) -> bool: ...
    @property
    def replay(self) -> Any: ...
    @property
    def decision(self) -> str: ...
    @property
    def approval_id(self) -> str | None: ...


Out = TypeVar("Out", bound=_Outcome)
A = TypeVar("A", bound=_Approval)
R = TypeVar("R", bound=_Result)


class CallObserver:
    """Metrics and traces of calls; ``CallObserver()`` observes nothing."""

    def __init__(self, metrics: Metrics | None = None, tracing: Tracing | None = None) -> None:
        self.metrics = metrics
        self.tracing = tracing or Tracing()
        self._quiet = metrics is None and not self.tracing.enabled

    def share_refused(self, share: str) -> None:
        """A request or a hold past a share (frontends/http/shares.py, held calls): counted when metrics are on."""
        if self.metrics is not None:
            self.metrics.share_refused(share)

    def auth_refused(self, reason: str) -> None:
        """A bearer token refused, by reason (gateway/auth/jwt.py): counted when metrics are on."""
        if self.metrics is not None:
            self.metrics.auth_refused(reason)

    def sso_refused(self, reason: str) -> None:
        """A sign-in at the approvals page refused, by its bounded reason (gateway/frontends/sso.py): counted when
        metrics are on."""
        if self.metrics is not None:
            self.metrics.sso_refused(reason)

    async def call(self, request: _Request, run: Awaitable[Out], registry: _Registry) -> Out:
        """Run one call (``run``) inside its span, counting it in flight and its outcome when done."""
        if self._quiet and request.traceparent is None:
            return await run
        metrics, run_key = self.metrics, (request.principal.key, request.session_id)
        started = time.perf_counter()
        outcome = "error"
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": request.tool,
                      "gateway.call_id": request.call_id, "gateway.frontend": request.frontend}
        with self.tracing.call("gateway.call", request.traceparent, attributes) as span:
            if metrics is not None:
                metrics.call_started(run_key)
            try:
                result = await run
                outcome = result.decision
                return result
            except UnknownToolError:
                outcome = "unknown_tool"
                raise
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            finally:
                if span is not None:
                    span.set_attribute("gateway.outcome", outcome)
                    if outcome not in _FINE:
                        failed(span, outcome)
                if metrics is not None:
                    metrics.call_ended(run_key)
                    tool = registry.get(request.tool)
                    metrics.finished(tool.upstream.name if tool is not None else "", outcome,
                                     time.perf_counter() - started)

    def decided(self, decision: Decision) -> None:
        """One stage's decision: counted by verdict and rule, and a span when tracing."""
        if self._quiet:
            return
        verdict, stage = str(decision.verdict), str(decision.stage)
        if self.metrics is not None:
            self.metrics.decided(stage, verdict, decision.decided_by, decision.elapsed_us / 1e6)
        if self.tracing.enabled:
            end = time.time_ns()
            attributes = {"gateway.stage": stage, "gateway.verdict": verdict, "gateway.revision": decision.revision,
                          "gateway.rules": [r.rule for r in decision.rules]}
            if decision.decided_by:
                attributes["gateway.rule"] = decision.decided_by
            self.tracing.finished_stage(_STAGE_SPANS[decision.stage], end - int(decision.elapsed_us * 1e3), end,
                                        attributes)
            span = current_span()
            if span is not None and decision.stage is Stage.REQUEST:  # the call's span says what decided it
                span.set_attribute("gateway.verdict", verdict)
                if decision.decided_by:
                    span.set_attribute("gateway.rule", decision.decided_by)

    async def held(self, hold: Awaitable[A]) -> A:
        """Wait for an approval (``hold``): the wait is timed, counted as pending meanwhile, and a span."""
        if self._quiet:
            return await hold
        metrics, started = self.metrics, time.perf_counter()
        result = "error"
        with self.tracing.stage("gateway.approval_wait") as span:
            if metrics is not None:
                metrics.approvals_pending.inc()
            try:
                approval = await hold
                result = ("replayed" if approval.replay is not None else "pending" if approval.pending
                          else "approved" if approval.approved
                          else "not_approved" if approval.decision == "reject" else approval.decision)
                if span is not None and approval.approval_id is not None:
                    span.set_attribute("gateway.approval_id", approval.approval_id)
                return approval
            except asyncio.CancelledError:
                result = "cancelled"
                raise
            finally:
                if span is not None:
                    span.set_attribute("gateway.approval.result", result)
                if metrics is not None:
                    metrics.approvals_pending.dec()
                    metrics.approval_waited(result, time.perf_counter() - started)

    async def upstream(self, name: str, call: Awaitable[R]) -> R:
        """The upstream leg (``call``): timed by outcome, errors counted, and the current span while it runs,
        so the trace context the upstream gets names it."""
        if self._quiet:
            return await call
        metrics, started = self.metrics, time.perf_counter()
        outcome: str | None = "failed"
        with self.tracing.stage("gateway.upstream", SpanKind.CLIENT) as span:
            if span is not None:
                span.set_attribute("gateway.upstream", name)
            try:
                result = await call
                outcome = "tool_error" if result.is_error else "ok"
                return result
            except InvalidArgumentsError:
                outcome = None  # refused before anything was sent: not an upstream error
                raise
            except UpstreamNotReached:
                outcome = "not_reached"
                raise
            except UpstreamError:
                outcome = "failed"
                raise
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            finally:
                if span is not None:
                    span.set_attribute("gateway.upstream.outcome", outcome or "not_called")
                    if outcome not in (None, "ok", "tool_error"):
                        failed(span, outcome or "")
                if metrics is not None and outcome is not None:
                    metrics.upstream_called(name, outcome, time.perf_counter() - started)


# Outcomes that are the gateway working as meant (a refusal is a policy's answer, not a failure of the call).
_FINE = frozenset({"allow", "rewrite", "skip", "reject", "terminate", "terminated", "approve", "pending",
                   "rate_limited", "invalid_arguments", "invalid_input"})
