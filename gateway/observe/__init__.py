"""Observability: Prometheus metrics, OpenTelemetry traces and JSON logs (docs/observability.md)."""

from __future__ import annotations

from gateway.observe.metrics import Metrics
from gateway.observe.observer import CallObserver
from gateway.observe.tracing import Tracing

__all__ = ["CallObserver", "Metrics", "Tracing"]
