"""The gateway config file (`gateway.yaml`), as pydantic models; also `gateway schema config`.

Secrets never appear as literals: a header value or API key that is secret is written as
``{env: NAME}`` or ``{file: PATH}`` and read when the gateway starts.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.core import limits
from gateway.core.durations import parse_duration
from gateway.core.globs import glob_problem
from gateway.core.limits import (
    AUDIT_MAX_EVENT_BYTES,
    AUDIT_MAX_VALUE_BYTES,
    DEFAULT_MAX_CONCURRENT_CALLS,
    DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    MAX_RESPONSE_BYTES,
)

__all__ = [
    "ApiKeySpec",
    "ApprovalsSpec",
    "AuditSpec",
    "AuthSpec",
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
    "TracingSpec",
    "UpstreamSpec",
    "WebhookSpec",
]

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"

# `env_passthrough` entries: a variable name, or a prefix ending in `*` (e.g. `AWS_*`).
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\*?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _duration(value: str | int | float) -> str | int | float:
    parse_duration(value)
    return value


def _globs(patterns: list[str]) -> list[str]:
    for pattern in patterns:
        problem = glob_problem(pattern)
        if problem is not None:
            raise ValueError(problem)
    return patterns


def _glob(pattern: str) -> str:
    return _globs([pattern])[0]


class SecretRef(_Strict):
    """A secret read from an environment variable or a file, never written in the config."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of 'env' or 'file'")
        return self


class ListenSpec(_Strict):
    """Where the gateway listens."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


class PostgresSpec(_Strict):
    """The shared store for several processes or replicas (docs/store.md)."""

    dsn: str | SecretRef  # libpq connection string or URL; usually {env: DATABASE_URL}


class StoreSpec(_Strict):
    """Where sessions (and approvals) live: the SQLite file, or PostgreSQL when ``postgres`` is given."""

    sqlite: str = "gateway.sqlite3"
    postgres: PostgresSpec | None = None
    # Other processes use this SQLite file too (set by `gateway serve --workers N`): each call's counts
    # are written before it answers, so the next call on any process sees them. Always so on PostgreSQL.
    shared: bool = False
    # How long a process's claim on an approved call it is running lasts unless renewed: a process
    # that died is noticed (its call marked interrupted) this long after its last renewal.
    lease: str | int | float = "15s"

    _lease = field_validator("lease")(_duration)


class AuditSpec(_Strict):
    """Where one JSON event per call goes, and what is redacted from it."""

    file: str | None = "audit.jsonl"
    stdout: bool = False
    redact_keys: list[str] = Field(default_factory=lambda: ["password", "secret", "token", "api_key",
                                                             "authorization"])
    redact_patterns: list[str] = Field(default_factory=list)
    fsync: bool = False  # fsync each event: survives power loss, costs a disk flush per event
    max_value_bytes: int = Field(AUDIT_MAX_VALUE_BYTES, ge=1_024)
    max_event_bytes: int = Field(AUDIT_MAX_EVENT_BYTES, ge=16_384)


class PrincipalSpec(_Strict):
    """Who a key belongs to."""

    id: str
    groups: list[str] = Field(default_factory=list)
    claims: dict[str, Any] = Field(default_factory=dict)


class ApiKeySpec(_Strict):
    """An API key, given by its SHA-256 (hex) or read from the environment or a file."""

    principal: PrincipalSpec
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    key: SecretRef | None = None
    approver: bool = False  # may decide approvals (issue: approvals)
    admin: bool = False  # an approver who sees every approval request, not only those their groups may decide
    metrics: bool = False  # a scrape-only key: GET /metrics and nothing else (docs/observability.md)

    @model_validator(mode="after")
    def _one(self) -> ApiKeySpec:
        if (self.sha256 is None) == (self.key is None):
            raise ValueError("give exactly one of 'sha256' or 'key' ({env: NAME} or {file: PATH})")
        if self.metrics and (self.approver or self.admin):
            # a scrape-only key that is also an approver would be neither: say so rather than pick one
            raise ValueError("'metrics: true' makes a scrape-only key and cannot be combined with 'approver' or"
                             " 'admin' (admin keys may scrape already): give the scraper its own key")
        return self


class AuthSpec(_Strict):
    """API keys; an anonymous principal only when asked for explicitly."""

    api_keys: list[ApiKeySpec] = Field(default_factory=list)
    anonymous: PrincipalSpec | None = None
    # the anonymous principal is refused on a non-loopback listen address unless this says so
    anonymous_beyond_loopback: bool = False


class PerPrincipalLimitsSpec(_Strict):
    """What one principal (one key) may use at once; null means no limit."""

    max_concurrent_calls: int | None = Field(DEFAULT_MAX_CONCURRENT_CALLS, ge=1)
    calls_per_minute: int | None = Field(None, ge=1)
    # calls held open on a connection for an approval; past it they are answered "pending" at once
    max_held_calls: int | None = Field(limits.DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL, ge=0)


class LimitsSpec(_Strict):
    """Per-call limits."""

    call_timeout: str | int | float = "30s"
    task_timeout: str | int | float = "10m"  # how long a call the client made a task may run (docs/gateway.md "Tasks")
    max_argument_bytes: int = Field(1_000_000, gt=0)
    max_response_bytes: int = Field(MAX_RESPONSE_BYTES, gt=0)  # per upstream response (see gateway/core/limits.py)
    max_sessions_per_principal: int = Field(DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, ge=1)  # open MCP sessions
    per_principal: PerPrincipalLimitsSpec = Field(default_factory=PerPrincipalLimitsSpec)

    _timeout = field_validator("call_timeout", "task_timeout")(_duration)


_ORIGIN = r"^https?://(\[[0-9a-fA-F:.]+\]|[^/:\[\]@?#]+)(:\d{1,5})?$"


class HttpSpec(_Strict):
    """The HTTP edge: which Host and Origin values are served, and how much a client may send, how slowly."""

    # Host names (or name:port) accepted in the Host header; "*" turns the check off. Default:
    # localhost, any IP literal, listen.host and approvals.public_url's host (none can be rebound).
    allowed_hosts: list[str] | None = None
    # Browser origins allowed besides the gateway's own (same Host) and approvals.public_url's.
    allowed_origins: list[str] = Field(default_factory=list)
    # default: 2 MiB, or limits.max_argument_bytes + 64 KiB when that is more
    max_body_bytes: int | None = Field(None, gt=0)
    max_header_bytes: int = Field(limits.DEFAULT_MAX_HEADER_BYTES, ge=1024)
    header_timeout: str | int | float = limits.DEFAULT_HEADER_TIMEOUT_SECONDS
    body_timeout: str | int | float = limits.DEFAULT_BODY_TIMEOUT_SECONDS
    max_connections: int = Field(limits.DEFAULT_MAX_CONNECTIONS, ge=1)
    # requests one principal may have open at once (default: max_connections / CONNECTION_SHARE_DIVISOR)
    max_connections_per_principal: int | None = Field(None, ge=1)
    # connections only approvers, admins and metrics keys may use, on the approvals and admin APIs and /metrics
    # (default: max_connections / RESERVED_CONNECTION_DIVISOR, at least 1)
    reserved_connections: int | None = Field(None, ge=0)

    _timeouts = field_validator("header_timeout", "body_timeout")(_duration)

    @model_validator(mode="after")
    def _reserve_fits(self) -> HttpSpec:
        if self.reserved_connections is not None and self.reserved_connections >= self.max_connections:
            raise ValueError(f"reserved_connections ({self.reserved_connections}) must be smaller than"
                             f" max_connections ({self.max_connections}): the rest is what agents use")
        return self

    def connection_share(self) -> int:
        """Requests one principal may have open at once."""
        if self.max_connections_per_principal is not None:
            return self.max_connections_per_principal
        return max(1, self.max_connections // limits.CONNECTION_SHARE_DIVISOR)

    def reserved(self) -> int:
        """Connections reserved for approvers, admins and metrics keys."""
        if self.reserved_connections is not None:
            return self.reserved_connections
        return min(self.max_connections - 1, max(1, self.max_connections // limits.RESERVED_CONNECTION_DIVISOR))

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not re.match(_ORIGIN, origin):
                raise ValueError(f"{origin!r} is not an origin: write scheme://host[:port], no path")
        return [o.lower() for o in value]


class HttpToolSpec(_Strict):
    """One tool of an HTTP upstream: an operation on a path template."""

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = ""
    title: str | None = None
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    path: str = Field(pattern=r"^/")
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    query: list[str] = Field(default_factory=list)  # args sent as query parameters
    body: Literal["json", "none"] | None = None  # default: json for POST/PUT/PATCH, none otherwise
    annotations: dict[str, Any] = Field(default_factory=dict)


class LaunchSpec(_Strict):
    """A process the gateway starts with itself and stops with itself (e.g. an example service)."""

    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    cwd: str | None = None
    # The gateway's variables the process also gets (it starts from a minimal environment).
    env_passthrough: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(default_factory=list)


class HttpUpstreamSpec(_Strict):
    """A REST service described tool by tool."""

    base_url: str = Field(pattern=r"^https?://")
    launch: LaunchSpec | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    timeout: str | int | float = "30s"
    tools: list[HttpToolSpec] = Field(default_factory=list)

    _timeout = field_validator("timeout")(_duration)


class OpenApiUpstreamSpec(_Strict):
    """A REST service described by an OpenAPI 3.x or Swagger 2.0 document; each operation becomes a tool."""

    spec: str  # a file (relative to the config) or an http(s) URL, fetched when the upstream starts
    base_url: str | None = Field(None, pattern=r"^https?://")
    launch: LaunchSpec | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    timeout: str | int | float = "30s"
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    _timeout = field_validator("timeout")(_duration)
    _globs = field_validator("include", "exclude")(_globs)


class ClientRequestsSpec(_Strict):
    """Which requests an MCP upstream may send the client whose call it runs (docs/gateway.md)."""

    sampling: Literal["allow", "deny"] = "allow"
    elicitation: Literal["allow", "deny"] = "allow"
    roots: Literal["allow", "deny"] = "allow"


class McpUpstreamSpec(_Strict):
    """An MCP server, over streamable HTTP (url) or stdio (command)."""

    url: str | None = Field(None, pattern=r"^https?://")
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    cwd: str | None = None
    timeout: str | int | float = "30s"
    # The gateway's variables a stdio server also gets (it starts from a minimal environment).
    env_passthrough: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(default_factory=list)
    # The MCP era spoken to this server (gateway/upstreams/mcp_eras.py): "auto" is the handshake when the
    # server offers it, else 2026-07-28; "newest" the reverse; "legacy" or "2026-07-28" only that one.
    protocol: Literal["auto", "newest", "legacy", "2026-07-28"] = "auto"
    client_requests: ClientRequestsSpec = Field(default_factory=ClientRequestsSpec)
    # Tools (globs over this server's own tool names) that work only for a client able to answer these
    # requests: they are listed to, and run for, only clients that declared the capabilities (docs/gateway.md).
    tools_need_client: dict[str, list[Literal["sampling", "elicitation", "roots"]]] = Field(default_factory=dict)
    # Over HTTP, a tools/call whose caller can be sent nothing but its result is one POST on a kept-alive
    # connection instead of a trip through the SDK's client (gateway/upstreams/mcp_lean.py). A troubleshooting
    # switch: false sends every call through the SDK's client.
    fast_calls: bool = True

    _timeout = field_validator("timeout")(_duration)

    @field_validator("tools_need_client")
    @classmethod
    def _needs(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        _globs(list(value))
        return value

    @model_validator(mode="after")
    def _one(self) -> McpUpstreamSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of 'url' (streamable HTTP) or 'command' (stdio)")
        return self


class UpstreamSpec(_Strict):
    """One upstream: a name, an optional tool-name prefix, and exactly one kind."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,32}$")
    prefix: str | None = Field(None, pattern=r"^[a-zA-Z0-9_-]{0,32}$")
    http: HttpUpstreamSpec | None = None
    openapi: OpenApiUpstreamSpec | None = None
    mcp: McpUpstreamSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> UpstreamSpec:
        kinds = [k for k in ("http", "openapi", "mcp") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"upstream {self.name!r} needs exactly one of http, openapi or mcp"
                             f" (got {', '.join(kinds) or 'none'})")
        return self

    @property
    def kind(self) -> str:
        """Which of http, openapi, mcp this upstream is."""
        return next(k for k in ("http", "openapi", "mcp") if getattr(self, k) is not None)

    def exposed_name(self, tool: str) -> str:
        """The name agents see: ``{prefix}_{tool}``, where the prefix defaults to the upstream name."""
        prefix = self.name if self.prefix is None else self.prefix
        return f"{prefix}_{tool}" if prefix else tool


ApprovalEvent = Literal["approval.created", "approval.decided", "approval.expired"]
APPROVAL_EVENTS: tuple[ApprovalEvent, ...] = ("approval.created", "approval.decided", "approval.expired")


class WebhookSpec(_Strict):
    """Where approval events are POSTed, signed per Standard Webhooks (`whsec_<base64>` or any text as the key)."""

    url: str = Field(pattern=r"^https?://")
    secret: SecretRef | None = None
    events: list[ApprovalEvent] = Field(default_factory=lambda: list(APPROVAL_EVENTS))


class ApprovalsSpec(_Strict):
    """Human approval: where approvers are sent, and who is told about requests."""

    public_url: str | None = Field(None, pattern=r"^https?://")  # base URL for links; default: listen address
    webhooks: list[WebhookSpec] = Field(default_factory=list)
    # Apply the audit log's redact_keys / redact_patterns to the arguments approvers see, stored
    # requests and webhooks. Off only if approvers must see the secrets themselves to decide.
    redact: bool = True


class ReloadSpec(_Strict):
    """How policy changes are taken up while the gateway runs (`reload_interval` is how often it looks)."""

    settle: str | int | float | None = None  # files unchanged this long before a load (default: 2 polls, ≥ 1s)
    manifest: str | None = None  # from `gateway check --write-manifest`: load only sets that match it

    @field_validator("settle")
    @classmethod
    def _settle(cls, value: str | int | float | None) -> str | int | float | None:
        return None if value is None else _duration(value)


class RunsSpec(_Strict):
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


class SupervisionSpec(_Strict):
    """How upstreams are kept up: retries of a down one (doubling from `retry_first` to `retry_max`) and checks."""

    retry_first: str | int | float = limits.UPSTREAM_RETRY_FIRST_SECONDS
    retry_max: str | int | float = limits.UPSTREAM_RETRY_MAX_SECONDS
    check_interval: str | int | float = limits.UPSTREAM_CHECK_SECONDS  # how often an upstream that is up is checked

    _durations = field_validator("retry_first", "retry_max", "check_interval")(_duration)


class ModelSpec(_Strict):
    """A model upstream behind `POST /v1/chat/completions` (docs/model-proxy.md): requests whose `model` matches
    `name` (a glob) go to `base_url` as `model`, and every tool call the model makes is decided by the policies."""

    name: str = Field(min_length=1)  # the model name agents ask for; a glob ("*" serves every name)
    base_url: str = Field(pattern=r"^https?://")  # the OpenAI-compatible API root, e.g. https://api.openai.com/v1
    model: str | None = None  # the upstream's name for it (default: the name the agent asked for)
    api_key: SecretRef | None = None  # sent as `Authorization: Bearer`
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

    _durations = field_validator("timeout", "approval_wait")(_duration)
    _name = field_validator("name")(_glob)
    _tools = field_validator("gateway_tools")(_globs)
    _client_tools = field_validator("client_tools")(lambda v: v if v is None else _globs(v))


class MetricsSpec(_Strict):
    """Prometheus metrics at GET /metrics on the gateway's listener, for keys with `metrics: true` or `admin: true`."""

    enabled: bool = True


class TracingSpec(_Strict):
    """OpenTelemetry traces: a span per call with its stages. The exporter's endpoint, headers and sampler come
    from the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, ...)."""

    enabled: bool = False
    # otlp needs the `otlp` extra (pip install 'agent-policy-gateway[otlp]'); console prints spans to stderr
    exporter: Literal["otlp", "console", "none"] = "otlp"
    service_name: str | None = None  # default: OTEL_SERVICE_NAME, else agent-policy-gateway


class McpFrontendSpec(_Strict):
    """The MCP endpoint at /mcp."""

    # Qualifying tools/calls answered without the MCP SDK's server machinery (docs/gateway.md "Lean tools/call path")
    fast_path: bool = True


class LoggingSpec(_Strict):
    """The gateway's own log lines (not the audit log): text, or one JSON object a line."""

    format: Literal["text", "json"] = "text"
    # quiet: libraries (httpx2, the MCP SDK, sse-starlette...) log warnings and errors only, whatever
    # --log-level says: their debug and info lines carry upstream URLs and message bodies, argument values
    # included. verbose: they log at --log-level too (troubleshooting only: values reach the log).
    libraries: Literal["quiet", "verbose"] = "quiet"


class GatewayConfig(_Strict):
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

    _interval = field_validator("reload_interval")(_duration)
