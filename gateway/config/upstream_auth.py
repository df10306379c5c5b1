"""An upstream's ``auth:``: a token from the identity provider on each request, instead of a static secret.

    auth:
      client_credentials:            # the gateway's own token for this upstream (RFC 6749 section 4.4)
        token_url: https://idp.example.com/oauth2/token      # or issuer: (OpenID discovery)
        client_id: gateway
        client_secret: {env: GATEWAY_IDP_SECRET}
        resource: https://billing.example.com                # RFC 8707; and/or audience:
        scopes: [billing.read]
    auth:
      token_exchange:                # the caller's token exchanged for one for this upstream (RFC 8693)
        issuer: https://idp.example.com
        client_id: gateway
        client_secret: {file: /run/secrets/idp}
        audience: billing
        requested_token_type: urn:ietf:params:oauth:token-type:access_token

Static secrets stay in ``headers``. Mistakes a person can make stop the config with file:line:col
(``auth_problems``): both grants or none, a token endpoint or an upstream that is not https (plain http
only to loopback), an ``Authorization`` header beside ``auth``, token exchange with no ``auth.jwt`` issuer whose
tokens could be exchanged, token exchange for an MCP upstream, ``auth`` for a stdio server.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.fields import SecretRef
from gateway.core.loopback import secure_url_problem
from gateway.core.strict import StrictModel

__all__ = ["ClientCredentialsSpec", "TokenExchangeSpec", "UpstreamAuthSpec"]

_ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


def _secure(url: str | None) -> str | None:
    problem = None if url is None else secure_url_problem(url)
    if problem is not None:
        raise ValueError(f"{url!r} {problem}: the client secret and tokens travel to it")
    return url


class _OAuthClientSpec(StrictModel):
    """The gateway as a client of the identity provider, and what it asks a token for."""

    token_url: str | None = None
    issuer: str | None = None  # the token endpoint from {issuer}/.well-known/openid-configuration
    client_id: str = Field(min_length=1)
    client_secret: SecretRef  # never a literal: {env: NAME} or {file: PATH}
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    audience: str | None = Field(None, min_length=1)
    resource: str | None = Field(None, min_length=1)  # RFC 8707 resource indicator (an absolute URI)
    scopes: list[str] = Field(default_factory=list)

    _urls = field_validator("token_url", "issuer")(_secure)

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        bad = [s for s in value if not s or any(c.isspace() or c in '"\\' for c in s)]
        if bad:
            raise ValueError(f"a scope is one word without spaces or quotes: {bad[0]!r}")
        return value

    @model_validator(mode="after")
    def _endpoint(self) -> _OAuthClientSpec:
        if (self.token_url is None) == (self.issuer is None):
            raise ValueError("give exactly one of 'token_url' or 'issuer' (its token endpoint found by discovery)")
        return self


class ClientCredentialsSpec(_OAuthClientSpec):
    """The gateway's own token for the upstream, one for every caller, cached until it expires."""


class TokenExchangeSpec(_OAuthClientSpec):
    """The caller's token exchanged at the IdP for one for the upstream, cached per caller until it expires."""

    requested_token_type: str = _ACCESS_TOKEN


class UpstreamAuthSpec(StrictModel):
    """Exactly one way the gateway gets a token for the upstream."""

    client_credentials: ClientCredentialsSpec | None = None
    token_exchange: TokenExchangeSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> UpstreamAuthSpec:
        if (self.client_credentials is None) == (self.token_exchange is None):
            raise ValueError("give exactly one of 'client_credentials' or 'token_exchange'")
        return self

    @property
    def grant(self) -> ClientCredentialsSpec | TokenExchangeSpec:
        """The one grant configured."""
        found = self.client_credentials or self.token_exchange
        assert found is not None
        return found
