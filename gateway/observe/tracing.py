"""OpenTelemetry traces: a span per call, child spans for its stages, and W3C trace context in and out.

Off (the default) nothing is recorded and no span object is made; a ``traceparent`` a client sent is
still passed on to the upstreams as it came, so the upstreams' traces join the client's. On, the
gateway has a TracerProvider of its own (not the process-global one), exporting with OTLP, to the
console or nowhere (``tracing.exporter``); endpoint, headers and sampler come from the standard
OTEL_* variables, which the SDK and the exporter read themselves.

Outgoing context: HTTP upstreams get a ``traceparent`` header (``outgoing_headers``); MCP upstreams
get ``_meta.traceparent`` from the MCP SDK, which injects the current context into every request it
sends (SEP-414), so the upstream span only has to be current while the upstream is called.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError

__all__ = ["DEFAULT_SERVICE_NAME", "Tracing", "build_tracing", "client_traceparent", "current_span",
           "current_trace_id", "failed", "outgoing_headers", "remote_parent"]

DEFAULT_SERVICE_NAME = "agent-policy-gateway"

_W3C = TraceContextTextMapPropagator()
_NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()


def remote_parent(traceparent: str | None) -> Context | None:
    """The context a client's ``traceparent`` names, or None when there is none or it is malformed
    (W3C rules: a malformed or all-zero header is ignored, never an error)."""
    if not traceparent or len(traceparent) > 512:
        return None
    parent = _W3C.extract({"traceparent": traceparent})
    return parent if trace.get_current_span(parent).get_span_context().is_valid else None


def client_traceparent(from_meta: Any, from_header: str | None) -> str | None:
    """The trace context an MCP client sent: ``_meta.traceparent`` (per request) before the HTTP header."""
    return from_meta if isinstance(from_meta, str) else from_header


def outgoing_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` plus ``traceparent`` when a trace is current (the upstream span, or the client's)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return headers
    out = dict(headers)
    propagate.inject(out)
    return out


class Tracing:
    """Spans for the pipeline; every method is a no-op returning quickly when tracing is off."""

    def __init__(self, provider: Any = None) -> None:
        self.provider = provider  # an opentelemetry.sdk.trace.TracerProvider, or None when off
        self._tracer: trace.Tracer | None = provider.get_tracer("gateway") if provider is not None else None

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded."""
        return self._tracer is not None

    def call(self, name: str, traceparent: str | None,
             attributes: dict[str, Any]) -> contextlib.AbstractContextManager[Span | None]:
        """The span of one call, child of the client's trace when it sent one (current until the block ends)."""
        parent = remote_parent(traceparent) if traceparent else None
        if self._tracer is None:
            return _NOOP if parent is None else _attached(parent)
        return self._tracer.start_as_current_span(name, context=parent or Context(), kind=SpanKind.SERVER,
                                                  attributes=attributes)

    def stage(self, name: str, kind: SpanKind = SpanKind.INTERNAL) -> contextlib.AbstractContextManager[Span | None]:
        """A child span of the current one, current until the block ends."""
        if self._tracer is None:
            return _NOOP
        return self._tracer.start_as_current_span(name, kind=kind, record_exception=False,
                                                  set_status_on_exception=False)

    def finished_stage(self, name: str, start_ns: int, end_ns: int, attributes: dict[str, Any]) -> None:
        """A child span of the current one for a stage that already ran (a policy decision: no await, no children)."""
        if self._tracer is not None:
            span = self._tracer.start_span(name, start_time=start_ns, attributes=attributes)
            span.end(end_time=end_ns)

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        if self.provider is not None:
            self.provider.shutdown()


@contextlib.contextmanager
def _attached(parent: Context) -> Iterator[None]:
    token = otel_context.attach(parent)
    try:
        yield None
    finally:
        otel_context.detach(token)


def current_span() -> Span | None:
    """The recording span of the current context, if any."""
    span = trace.get_current_span()
    return span if span.is_recording() else None


def current_trace_id() -> str | None:
    """The trace id of the current context as 32 hex digits (the call's span, or the client's valid
    ``traceparent`` attached with tracing off), or None when there is no trace: what audit events carry."""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def failed(span: Span | None, kind: str) -> None:
    """Mark a span as failed with an error type."""
    if span is not None:
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR))


def build_tracing(enabled: bool, exporter: str, service_name: str | None, where: str) -> Tracing:
    """Tracing from the `tracing:` config (OTEL_SDK_DISABLED=true turns it off as the SDK defines)."""
    if not enabled or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Tracing()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError([Diagnostic(
                "tracing-exporter", "tracing.exporter is otlp, but the OTLP exporter is not installed", where,
                hint="pip install 'agent-policy-gateway[otlp]', or set tracing.exporter: console or none")]) from None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    return Tracing(provider)
