"""The upstreams section: HTTP services described tool by tool, OpenAPI documents and MCP servers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.fields import ENV_NAME_PATTERN, TOOL_NAME_PATTERN, SecretRef, check_duration, check_globs
from gateway.config.upstream_auth import UpstreamAuthSpec
from gateway.core.strict import StrictModel

__all__ = [
    "ClientRequestsSpec",
    "HttpToolSpec",
    "HttpUpstreamSpec",
    "LaunchSpec",
    "McpUpstreamSpec",
    "OpenApiUpstreamSpec",
    "UpstreamSpec",
]


class HttpToolSpec(StrictModel):
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


class LaunchSpec(StrictModel):
    """A process the gateway starts with itself and stops with itself (e.g. an example service)."""

    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    cwd: str | None = None
    # The gateway's variables the process also gets (it starts from a minimal environment).
    env_passthrough: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(default_factory=list)


class HttpUpstreamSpec(StrictModel):
    """A REST service described tool by tool."""

    base_url: str = Field(pattern=r"^https?://")
    launch: LaunchSpec | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    auth: UpstreamAuthSpec | None = None  # a token from the identity provider on each request (upstream_auth.py)
    timeout: str | int | float = "30s"
    tools: list[HttpToolSpec] = Field(default_factory=list)

    _timeout = field_validator("timeout")(check_duration)


class OpenApiUpstreamSpec(StrictModel):
    """A REST service described by an OpenAPI 3.x or Swagger 2.0 document; each operation becomes a tool."""

    spec: str  # a file (relative to the config) or an http(s) URL, fetched when the upstream starts
    base_url: str | None = Field(None, pattern=r"^https?://")
    launch: LaunchSpec | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    auth: UpstreamAuthSpec | None = None  # a token from the identity provider on each request (upstream_auth.py)
    timeout: str | int | float = "30s"
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    _timeout = field_validator("timeout")(check_duration)
    _globs = field_validator("include", "exclude")(check_globs)


class ClientRequestsSpec(StrictModel):
    """Which requests an MCP upstream may send the client whose call it runs (docs/gateway.md)."""

    sampling: Literal["allow", "deny"] = "allow"
    elicitation: Literal["allow", "deny"] = "allow"
    roots: Literal["allow", "deny"] = "allow"


class McpUpstreamSpec(StrictModel):
    """An MCP server, over streamable HTTP (url) or stdio (command)."""

    url: str | None = Field(None, pattern=r"^https?://")
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    auth: UpstreamAuthSpec | None = None  # a token from the identity provider on each request (upstream_auth.py)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    cwd: str | None = None
    timeout: str | int | float = "30s"
    # The gateway's variables a stdio server also gets (it starts from a minimal environment).
    env_passthrough: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(default_factory=list)
    # The MCP era spoken to this server (gateway/upstreams/mcp/eras.py): "auto" is the handshake when the
    # server offers it, else 2026-07-28; "newest" the reverse; "legacy" or "2026-07-28" only that one.
    protocol: Literal["auto", "newest", "legacy", "2026-07-28"] = "auto"
    client_requests: ClientRequestsSpec = Field(default_factory=ClientRequestsSpec)
    # Tools (globs over this server's own tool names) that work only for a client able to answer these
    # requests: they are listed to, and run for, only clients that declared the capabilities (docs/gateway.md).
    tools_need_client: dict[str, list[Literal["sampling", "elicitation", "roots"]]] = Field(default_factory=dict)
    # Over HTTP, a tools/call whose caller can be sent nothing but its result is one POST on a kept-alive
    # connection instead of a trip through the SDK's client (gateway/upstreams/mcp/lean.py). A troubleshooting
    # switch: false sends every call through the SDK's client.
    fast_calls: bool = True

    _timeout = field_validator("timeout")(check_duration)

    @field_validator("tools_need_client")
    @classmethod
    def _needs(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        check_globs(list(value))
        return value

    @model_validator(mode="after")
    def _one(self) -> McpUpstreamSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of 'url' (streamable HTTP) or 'command' (stdio)")
        return self


class UpstreamSpec(StrictModel):
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
