"""The gateway config file (`gateway.yaml`), as pydantic models; also `gateway schema config`.

Secrets never appear as literals: a header value or API key that is secret is written as
``{env: NAME}`` or ``{file: PATH}`` and read when the gateway starts.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from gateway.config.auth import APPROVAL_EVENTS as APPROVAL_EVENTS
from gateway.config.auth import ApiKeySpec, ApprovalsSpec, AuthSpec, WebhookSpec
from gateway.config.auth import ApprovalEvent as ApprovalEvent
from gateway.config.auth import PrincipalSpec as PrincipalSpec
from gateway.config.edge import HttpSpec, LimitsSpec, ListenSpec, PerPrincipalLimitsSpec
from gateway.config.fields import ENV_NAME_PATTERN as ENV_NAME_PATTERN
from gateway.config.fields import TOOL_NAME_PATTERN as TOOL_NAME_PATTERN
from gateway.config.fields import SecretRef, check_duration, check_glob, check_globs
from gateway.config.identity import JwtSpec as JwtSpec
from gateway.config.observe import AuditSpec, LoggingSpec, MetricsSpec, TracingSpec
from gateway.config.upstreams import ClientRequestsSpec as ClientRequestsSpec
from gateway.config.upstreams import (
    HttpToolSpec,
    HttpUpstreamSpec,
    LaunchSpec,
    McpUpstreamSpec,
    OpenApiUpstreamSpec,
    UpstreamSpec,
)
from gateway.core import limits
from gateway.core.durations import parse_duration
from gateway.core.strict import StrictModel

__all__ = [
    "ApiKeySpec",
    "ApprovalsSpec",
    "AuditSpec",
    "AuthSpec",
    "ConsoleSpec",
    "GatewayConfig",
    "HttpSpec",
    "HttpToolSpec",
    "HttpUpstreamSpec",
    "LaunchSpec",
    "LimitsSpec",
    "ListenSpec",
    "LoggingSpec",
    "McpUpstreamSpec",
    "MetricsSpec",
    "ModelSpec",
    "OpenApiUpstreamSpec",
    "PerPrincipalLimitsSpec",
    "ReloadSpec",
    "RunsSpec",
    "SecretRef",
    "StoreSpec",
    "SupervisionSpec",
    "ToolsLockSpec",
    "TracingSpec",
    "UpstreamSpec",
    "WebhookSpec",
]


class PostgresSpec(StrictModel):
    """The shared store for several processes or replicas (docs/store.md)."""

    dsn: str | SecretRef  # libpq connection string or URL; usually {env: DATABASE_URL}


class StoreSpec(StrictModel):
    """Where sessions (and approvals) live: the SQLite file, or PostgreSQL when ``postgres`` is given."""

    sqlite: str = "gateway.sqlite3"
    postgres: PostgresSpec | None = None
    # Other processes use this SQLite file too (set by `gateway serve --workers N`): each call's counts
    # are written before it answers, so the next call on any process sees them. Always so on PostgreSQL.
    shared: bool = False
    # How long a process's claim on an approved call it is running lasts unless renewed: a process
    # that died is noticed (its call marked interrupted) this long after its last renewal.
    lease: str | int | float = "15s"

    _lease = field_validator("lease")(check_duration)



class ReloadSpec(StrictModel):
    """How policy changes are taken up while the gateway runs (`reload_interval` is how often it looks)."""

    settle: str | int | float | None = None  # files unchanged this long before a load (default: 2 polls, ≥ 1s)
    manifest: str | None = None  # from `gateway check --write-manifest`: load only sets that match it

    @field_validator("settle")
    @classmethod
    def _settle(cls, value: str | int | float | None) -> str | int | float | None:
        return None if value is None else check_duration(value)


class RunsSpec(StrictModel):
    """Agent runs (docs/runs.md): how long an implicit run (a client that names no run id) lasts without a call."""

    idle_timeout: str | int | float = "10m"

    @field_validator("idle_timeout")
    @classmethod
    def _positive(cls, value: str | int | float) -> str | int | float:
        if parse_duration(value) <= 0:
            raise ValueError("idle_timeout must be more than 0")
        return value


USAGE_WINDOW_NAME = r"^[a-z][a-z0-9_]*$"


def _usage_windows(value: dict[str, str | int | float]) -> dict[str, str | int | float]:
    for name, duration in value.items():
        if not re.match(USAGE_WINDOW_NAME, name):
            raise ValueError(f"usage window name {name!r} must match {USAGE_WINDOW_NAME}")
        seconds = parse_duration(duration)
        if seconds < limits.USAGE_BUCKET_SECONDS or seconds % limits.USAGE_BUCKET_SECONDS:
            raise ValueError(f"usage window {name!r} must be a whole number of minutes (at least 1m)")
    return value


class SupervisionSpec(StrictModel):
    """How upstreams are kept up: retries of a down one (doubling from `retry_first` to `retry_max`) and checks."""

    retry_first: str | int | float = limits.UPSTREAM_RETRY_FIRST_SECONDS
    retry_max: str | int | float = limits.UPSTREAM_RETRY_MAX_SECONDS
    check_interval: str | int | float = limits.UPSTREAM_CHECK_SECONDS  # how often an upstream that is up is checked

    _durations = field_validator("retry_first", "retry_max", "check_interval")(check_duration)


class ModelSpec(StrictModel):
    """A model upstream behind the model proxy (docs/model-proxy.md): requests whose `model` matches `name` (a
    glob) go to `base_url` as `model`, in the entry's `api`; every tool call the model makes is decided by policy."""

    name: str = Field(min_length=1)  # the model name agents ask for; a glob ("*" serves every name)
    # The API the upstream speaks, and the only endpoint serving this entry: /v1/chat/completions, /v1/responses
    # (OpenAI Responses) or /v1/messages (Anthropic Messages). No translation between APIs.
    api: Literal["chat", "responses", "messages"] = "chat"
    # The API root with its version, e.g. https://api.openai.com/v1, https://api.anthropic.com/v1; requests go to
    # {base_url}/chat/completions, /responses or /messages.
    base_url: str = Field(pattern=r"^https?://")
    model: str | None = None  # the upstream's name for it (default: the name the agent asked for)
    api_key: SecretRef | None = None  # sent as `Authorization: Bearer` (messages: `x-api-key`)
    timeout: str | int | float = limits.MODEL_TIMEOUT_SECONDS
    # Tools the gateway fronts (exposed names, globs) offered to the model and run by the gateway itself.
    gateway_tools: list[str] = Field(default_factory=list)
    # Tools the agent runs itself (names, globs): `gateway check` knows them (tool.upstream "client"),
    # and when given, a request offering the model any other agent tool is refused (400).
    client_tools: list[str] | None = None
    tool_concurrency: int = Field(limits.MODEL_TOOL_CONCURRENCY, ge=1)
    max_turns: int = Field(limits.MODEL_MAX_TURNS, ge=1)  # model requests per agent request
    # hold: wait up to approval_wait for the decision; answer: say at once that the call awaits approval
    approval: Literal["hold", "answer"] = "hold"
    approval_wait: str | int | float = limits.MODEL_APPROVAL_WAIT_SECONDS

    _durations = field_validator("timeout", "approval_wait")(check_duration)
    _name = field_validator("name")(check_glob)
    _tools = field_validator("gateway_tools")(check_globs)
    _client_tools = field_validator("client_tools")(lambda v: v if v is None else check_globs(v))



class ConsoleSpec(StrictModel):
    """The operator console at /console (docs/console.md): its copy of the decision log in the store."""

    enabled: bool = True
    retention: str | int | float = "7d"  # events older than this are deleted from the store (the file keeps them)

    _retention = field_validator("retention")(check_duration)


class ToolsLockSpec(StrictModel):
    """Pinned tool definitions (docs/gateway.md "Pinned tools"): tools checked against the lock when listed."""

    file: str = Field(min_length=1)  # written by `gateway tools --config gateway.yaml --lock`
    # A drifted tool is hidden (its calls are unknown), listed but refused, or only warned about.
    on_drift: Literal["hide", "reject", "warn"] = "hide"
    allow_new: bool = False  # a tool the lock does not hold is drifted unless this is true


class McpFrontendSpec(StrictModel):
    """The MCP endpoint at /mcp."""

    # Qualifying tools/calls answered without the MCP SDK's server machinery (docs/gateway.md "Lean tools/call path")
    fast_path: bool = True



class GatewayConfig(StrictModel):
    """The whole gateway: where it listens, its policies, upstreams, auth, store and audit."""

    listen: ListenSpec = Field(default_factory=ListenSpec)
    policies: list[str] = Field(default_factory=lambda: ["policies"])
    engine: Literal["auto", "cel-expr-python", "cel-python"] = "auto"
    env: dict[str, Any] = Field(default_factory=dict)
    store: StoreSpec = Field(default_factory=StoreSpec)
    audit: AuditSpec = Field(default_factory=AuditSpec)
    auth: AuthSpec = Field(default_factory=AuthSpec)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    upstreams: list[UpstreamSpec] = Field(default_factory=list)
    models: list[ModelSpec] = Field(default_factory=list)  # the model proxy (docs/model-proxy.md)
    approvals: ApprovalsSpec = Field(default_factory=ApprovalsSpec)
    http: HttpSpec = Field(default_factory=HttpSpec)
    reload_interval: str | int | float = "1s"
    reload: ReloadSpec = Field(default_factory=ReloadSpec)
    runs: RunsSpec = Field(default_factory=RunsSpec)
    # Per-principal rolling windows that CEL reads as usage.<name> (e.g. {hour: 1h, day: 24h}); docs/runs.md
    usage_windows: dict[str, str | int | float] = Field(default_factory=dict)

    _windows = field_validator("usage_windows")(_usage_windows)
    supervision: SupervisionSpec = Field(default_factory=SupervisionSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    tracing: TracingSpec = Field(default_factory=TracingSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    mcp: McpFrontendSpec = Field(default_factory=McpFrontendSpec)
    tools_lock: ToolsLockSpec | None = None
    console: ConsoleSpec = Field(default_factory=ConsoleSpec)

    _interval = field_validator("reload_interval")(check_duration)
