"""Who may call and who decides: API keys and their principals, the anonymous principal, approvals and webhooks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.fields import SecretRef
from gateway.config.identity import JwtSpec
from gateway.core.strict import StrictModel
from gateway.policy.callspec import PrincipalSpec

__all__ = [
    "APPROVAL_EVENTS", "ApiKeySpec", "ApprovalEvent", "ApprovalsSpec", "AuthSpec", "PrincipalSpec", "WebhookSpec",
]


class ApiKeySpec(StrictModel):
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


class AuthSpec(StrictModel):
    """API keys and identity providers' tokens (`jwt`); an anonymous principal only when asked for explicitly."""

    api_keys: list[ApiKeySpec] = Field(default_factory=list)
    jwt: list[JwtSpec] = Field(default_factory=list)  # JWT access tokens, one entry per issuer (docs/identity.md)
    anonymous: PrincipalSpec | None = None
    # the anonymous principal is refused on a non-loopback listen address unless this says so
    anonymous_beyond_loopback: bool = False


ApprovalEvent = Literal["approval.created", "approval.decided", "approval.expired"]
APPROVAL_EVENTS: tuple[ApprovalEvent, ...] = ("approval.created", "approval.decided", "approval.expired")


class WebhookSpec(StrictModel):
    """Where approval events are POSTed, signed per Standard Webhooks (`whsec_<base64>` or any text as the key)."""

    url: str = Field(pattern=r"^https?://")
    secret: SecretRef | None = None
    events: list[ApprovalEvent] = Field(default_factory=lambda: list(APPROVAL_EVENTS))


class ApprovalsSpec(StrictModel):
    """Human approval: where approvers are sent, and who is told about requests."""

    public_url: str | None = Field(None, pattern=r"^https?://")  # base URL for links; default: listen address
    webhooks: list[WebhookSpec] = Field(default_factory=list)
    # Apply the audit log's redact_keys / redact_patterns to the arguments approvers see, stored
    # requests and webhooks. Off only if approvers must see the secrets themselves to decide.
    redact: bool = True

