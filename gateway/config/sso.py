"""Single sign-on for the approvals page: ``approvals.sso`` (an OpenID Connect client of one ``auth.jwt`` issuer).

    approvals:
      sso:
        issuer: https://idp.example.com        # one of auth.jwt[].issuer: its `principal` and `roles` apply
        client_id: gateway-approvals
        client_secret: {env: SSO_CLIENT_SECRET}  # omit for a public client (PKCE alone)
        scopes: [openid, profile, email]       # add `groups` where the IdP puts groups behind a scope (Okta)
        session_lifetime: 1h                   # then the approver signs in again, and roles are read afresh
        name: Okta                             # the page's "Sign in with Okta"; default: the issuer's host

The checks that need the rest of the config (the issuer is an ``auth.jwt`` issuer; the page's address is
https unless it is this machine) are ``sso_problems``, reported at their ``file:line:col`` by the loader.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gateway.config.fields import SecretRef, check_duration
from gateway.core.durations import parse_duration
from gateway.core.limits import MAX_SSO_SESSION_SECONDS
from gateway.core.strict import StrictModel

__all__ = ["SsoSpec"]


class SsoSpec(StrictModel):
    """The approvals page's OpenID Connect client: authorization code with PKCE at one ``auth.jwt`` issuer."""

    issuer: str = Field(pattern=r"^https?://")
    client_id: str = Field(min_length=1, max_length=256)
    client_secret: SecretRef | None = None  # None: a public client; PKCE is what binds the code to the browser
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"])
    token_auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    session_lifetime: str | int | float = "1h"
    name: str | None = Field(None, min_length=1, max_length=60)

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, scopes: list[str]) -> list[str]:
        if "openid" not in scopes:
            raise ValueError("scopes must include 'openid' (without it the IdP sends no ID token)")
        for scope in scopes:
            if not scope or any(c.isspace() or c in '"\\' for c in scope):
                raise ValueError(f"scope {scope!r} is not a scope token (no spaces, quotes or backslashes)")
        return scopes

    @field_validator("session_lifetime")
    @classmethod
    def _lifetime(cls, value: str | int | float) -> str | int | float:
        check_duration(value)
        seconds = parse_duration(value)
        if not 60 <= seconds <= MAX_SSO_SESSION_SECONDS:
            raise ValueError(f"session_lifetime must be between 1m and {MAX_SSO_SESSION_SECONDS // 3600}h: an"
                             " approver whose role is taken away at the IdP keeps it until their session ends")
        return value

    def lifetime_seconds(self) -> float:
        """The session's lifetime in seconds."""
        return parse_duration(self.session_lifetime)

    def display_name(self) -> str:
        """What the page's button names: ``name``, or the issuer's host."""
        return self.name or (urlsplit(self.issuer).hostname or self.issuer)
