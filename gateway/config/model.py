"""The gateway config file (`gateway.yaml`), as pydantic models; also `gateway schema config`.

Secrets never appear as literals: a header value or API key that is secret is written as
``{env: NAME}`` or ``{file: PATH}`` and read when the gateway starts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.policy.model import parse_duration

__all__ = [
    "ApiKeySpec",
    "ApprovalsSpec",
    "AuditSpec",
    "AuthSpec",
    "GatewayConfig",
    "HttpToolSpec",
    "HttpUpstreamSpec",
    "LaunchSpec",
    "LimitsSpec",
    "ListenSpec",
    "McpUpstreamSpec",
    "OpenApiUpstreamSpec",
    "SecretRef",
    "StoreSpec",
    "UpstreamSpec",
    "WebhookSpec",
]

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _duration(value: str | int | float) -> str | int | float:
    parse_duration(value)
    return value


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


class StoreSpec(_Strict):
    """Where sessions (and approvals) live."""

    sqlite: str = "gateway.sqlite3"


class AuditSpec(_Strict):
    """Where one JSON event per call goes, and what is redacted from it."""

    file: str | None = "audit.jsonl"
    stdout: bool = False
    redact_keys: list[str] = Field(default_factory=lambda: ["password", "secret", "token", "api_key",
                                                             "authorization"])
    redact_patterns: list[str] = Field(default_factory=list)


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

    @model_validator(mode="after")
    def _one(self) -> ApiKeySpec:
        if (self.sha256 is None) == (self.key is None):
            raise ValueError("give exactly one of 'sha256' or 'key' ({env: NAME} or {file: PATH})")
        return self


class AuthSpec(_Strict):
    """API keys; an anonymous principal only when asked for explicitly."""

    api_keys: list[ApiKeySpec] = Field(default_factory=list)
    anonymous: PrincipalSpec | None = None


class LimitsSpec(_Strict):
    """Per-call limits."""

    call_timeout: str | int | float = "30s"
    max_argument_bytes: int = Field(1_000_000, gt=0)

    _timeout = field_validator("call_timeout")(_duration)


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


class HttpUpstreamSpec(_Strict):
    """A REST service described tool by tool."""

    base_url: str = Field(pattern=r"^https?://")
    launch: LaunchSpec | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    timeout: str | int | float = "30s"
    tools: list[HttpToolSpec] = Field(default_factory=list)

    _timeout = field_validator("timeout")(_duration)


class OpenApiUpstreamSpec(_Strict):
    """A REST service described by an OpenAPI 3.x document; each operation becomes a tool."""

    spec: str
    base_url: str | None = Field(None, pattern=r"^https?://")
    launch: LaunchSpec | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    timeout: str | int | float = "30s"
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    _timeout = field_validator("timeout")(_duration)


class McpUpstreamSpec(_Strict):
    """An MCP server, over streamable HTTP (url) or stdio (command)."""

    url: str | None = Field(None, pattern=r"^https?://")
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    cwd: str | None = None
    timeout: str | int | float = "30s"

    _timeout = field_validator("timeout")(_duration)

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
    """Where approval events are POSTed, signed with HMAC-SHA256 of the body."""

    url: str = Field(pattern=r"^https?://")
    secret: SecretRef | None = None
    events: list[ApprovalEvent] = Field(default_factory=lambda: list(APPROVAL_EVENTS))


class ApprovalsSpec(_Strict):
    """Human approval: where approvers are sent, and who is told about requests."""

    public_url: str | None = Field(None, pattern=r"^https?://")  # base URL for links; default: listen address
    webhooks: list[WebhookSpec] = Field(default_factory=list)


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
    approvals: ApprovalsSpec = Field(default_factory=ApprovalsSpec)
    reload_interval: str | int | float = "1s"

    _interval = field_validator("reload_interval")(_duration)
