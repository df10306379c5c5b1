"""What the gateway tells: the audit log, metrics, traces and its own log lines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.fields import SecretRef
from gateway.core.limits import (
    AUDIT_CHECKPOINT_EVERY,
    AUDIT_MAX_EVENT_BYTES,
    AUDIT_MAX_VALUE_BYTES,
    AUDIT_ROTATE_MIN_BYTES,
)
from gateway.core.strict import StrictModel

__all__ = ["AuditRotateSpec", "AuditSignSpec", "AuditSpec", "LoggingSpec", "MetricsSpec", "TracingSpec"]


class AuditRotateSpec(StrictModel):
    """Rotation by size: FILE is renamed FILE.1 (FILE.1 FILE.2, …) before a write would take it past max_bytes."""

    max_bytes: int = Field(ge=AUDIT_ROTATE_MIN_BYTES)
    keep: int | None = Field(None, ge=1)  # rotated files kept (the oldest past it removed); null: all of them


class AuditSignSpec(StrictModel):
    """Signed checkpoints: every `every` events, an audit.checkpoint event signs the chain's head with Ed25519."""

    key: SecretRef  # the private key, PEM (PKCS#8, unencrypted): {file: audit-signing.pem} or {env: NAME}
    every: int = Field(AUDIT_CHECKPOINT_EVERY, ge=1)


class AuditSpec(StrictModel):
    """Where one JSON event per call goes, and what is redacted from it."""

    file: str | None = "audit.jsonl"
    stdout: bool = False
    redact_keys: list[str] = Field(default_factory=lambda: ["password", "secret", "token", "api_key",
                                                             "authorization"])
    redact_patterns: list[str] = Field(default_factory=list)
    fsync: bool = False  # fsync each event: survives power loss, costs a disk flush per event
    max_value_bytes: int = Field(AUDIT_MAX_VALUE_BYTES, ge=1_024)
    max_event_bytes: int = Field(AUDIT_MAX_EVENT_BYTES, ge=16_384)
    rotate: AuditRotateSpec | None = None
    sign: AuditSignSpec | None = None
    # When the file's last line is not a chained event at start: stop (the default), or begin a new chain
    # after it, with an audit.chain_started event saying why.
    on_broken_chain: Literal["stop", "start_new"] = "stop"



class MetricsSpec(StrictModel):
    """Prometheus metrics at GET /metrics on the gateway's listener, for keys with `metrics: true` or `admin: true`."""

    enabled: bool = True


class TracingSpec(StrictModel):
    """OpenTelemetry traces: a span per call with its stages. The exporter's endpoint, headers and sampler come
    from the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, ...)."""

    enabled: bool = False
    # otlp needs the `otlp` extra (pip install 'agent-policy-gateway[otlp]'); console prints spans to stderr
    exporter: Literal["otlp", "console", "none"] = "otlp"
    service_name: str | None = None  # default: OTEL_SERVICE_NAME, else agent-policy-gateway



class LoggingSpec(StrictModel):
    """The gateway's own log lines (not the audit log): text, or one JSON object a line."""

    format: Literal["text", "json"] = "text"
    # quiet: libraries (httpx2, the MCP SDK, sse-starlette...) log warnings and errors only, whatever
    # --log-level says: their debug and info lines carry upstream URLs and message bodies, argument values
    # included. verbose: they log at --log-level too (troubleshooting only: values reach the log).
    libraries: Literal["quiet", "verbose"] = "quiet"

