"""The edge of the gateway: where it listens, the HTTP it accepts, and what one call or one principal may use."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from gateway.config.fields import check_duration
from gateway.core import limits
from gateway.core.limits import DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, MAX_RESPONSE_BYTES
from gateway.core.strict import StrictModel

__all__ = ["HttpSpec", "LimitsSpec", "ListenSpec", "PerPrincipalLimitsSpec"]


class ListenSpec(StrictModel):
    """Where the gateway listens."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)



class PerPrincipalLimitsSpec(StrictModel):
    """What one principal (one key) may use at once; null means no limit."""

    max_concurrent_calls: int | None = Field(DEFAULT_MAX_CONCURRENT_CALLS, ge=1)
    calls_per_minute: int | None = Field(None, ge=1)
    # calls held open on a connection for an approval; past it they are answered "pending" at once
    max_held_calls: int | None = Field(limits.DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL, ge=0)


class LimitsSpec(StrictModel):
    """Per-call limits."""

    call_timeout: str | int | float = "30s"
    task_timeout: str | int | float = "10m"  # how long a call the client made a task may run (docs/gateway.md "Tasks")
    max_argument_bytes: int = Field(1_000_000, gt=0)
    max_response_bytes: int = Field(MAX_RESPONSE_BYTES, gt=0)  # per upstream response (see core/limits/upstreams.py)
    max_sessions_per_principal: int = Field(DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, ge=1)  # open MCP sessions
    per_principal: PerPrincipalLimitsSpec = Field(default_factory=PerPrincipalLimitsSpec)

    _timeout = field_validator("call_timeout", "task_timeout")(check_duration)


_ORIGIN = r"^https?://(\[[0-9a-fA-F:.]+\]|[^/:\[\]@?#]+)(:\d{1,5})?$"


class HttpSpec(StrictModel):
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

    _timeouts = field_validator("header_timeout", "body_timeout")(check_duration)

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
