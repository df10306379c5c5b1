"""The `tracing:` and `logging:` knobs: exporters, OTEL_SDK_DISABLED, and JSON log lines that name their trace."""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config.model import GatewayConfig
from gateway.core.errors import ConfigError
from gateway.observe.logs import JsonFormatter
from gateway.observe.tracing import DEFAULT_SERVICE_NAME, build_tracing


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


OTLP = _installed("opentelemetry.exporter.otlp.proto.http.trace_exporter")


def test_defaults_are_metrics_on_tracing_off_text_logs():
    config = GatewayConfig()
    assert (config.metrics.enabled, config.tracing.enabled, config.logging.format) == (True, False, "text")
    assert build_tracing(False, "otlp", None, "gateway.yaml").provider is None


@pytest.mark.parametrize("role", ["admin", "approver"])
def test_a_metrics_key_cannot_also_be_an_approver_or_admin(role):
    # metrics: true makes a scrape-only key: combined with a role that acts, one of the two would be a lie
    key = {"principal": {"id": "prometheus"}, "sha256": "0" * 64, "metrics": True, role: True}
    with pytest.raises(ValueError, match="scrape-only"):
        GatewayConfig.model_validate({"auth": {"api_keys": [key]}})


def test_unknown_exporter_and_log_format_are_config_errors():
    with pytest.raises(ValueError, match="exporter"):
        GatewayConfig.model_validate({"tracing": {"enabled": True, "exporter": "zipkin"}})
    with pytest.raises(ValueError, match="format"):
        GatewayConfig.model_validate({"logging": {"format": "xml"}})


@pytest.mark.skipif(OTLP, reason="the otlp extra is installed")
def test_otlp_without_the_extra_says_how_to_install_it():
    with pytest.raises(ConfigError) as caught:
        build_tracing(True, "otlp", None, "gateway.yaml")
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.code == "tracing-exporter" and "[otlp]" in (diagnostic.hint or "")


def test_otel_sdk_disabled_turns_tracing_off(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not build_tracing(True, "none", None, "gateway.yaml").enabled


def test_service_name_from_config_then_env_then_default(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    tracing = build_tracing(True, "none", None, "gateway.yaml")
    assert tracing.provider.resource.attributes["service.name"] == DEFAULT_SERVICE_NAME
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    assert build_tracing(True, "none", None, "g").provider.resource.attributes["service.name"] == "from-env"
    assert build_tracing(True, "none", "mine", "g").provider.resource.attributes["service.name"] == "mine"


def test_console_exporter_prints_spans_to_stderr(capsys):
    tracing = build_tracing(True, "console", "console-test", "gateway.yaml")
    with tracing.stage("gateway.decide"):
        pass
    tracing.shutdown()
    assert '"name": "gateway.decide"' in capsys.readouterr().err


def test_json_log_lines_name_the_current_trace():
    tracing = build_tracing(True, "none", None, "gateway.yaml")
    exporter = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(exporter))
    formatter = JsonFormatter()
    record = logging.LogRecord("gateway.pipeline", logging.WARNING, __file__, 1, "call %s: %s", ("c-1", "ünïcode"),
                               None)
    outside = json.loads(formatter.format(record))
    assert "trace_id" not in outside and outside["message"] == "call c-1: ünïcode"
    with tracing.call("gateway.call", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", {}):
        inside = json.loads(formatter.format(record))
    [span] = exporter.get_finished_spans()
    assert inside["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert inside["span_id"] == f"{span.context.span_id:016x}"
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys
        record.exc_info = sys.exc_info()
    assert "RuntimeError: boom" in json.loads(formatter.format(record))["exception"]
