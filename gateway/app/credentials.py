"""The parts of the composition root that read secrets and credentials: API keys, identity providers, webhook keys,
and the client secrets of upstreams' ``auth:``.

Secrets are read once, when the gateway is built, and handed to components as plain values; a missing
one fails the start with the config path that names it.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.approvals.webhooks import Webhook, WebhookNotifier, signing_key
from gateway.auth.claims import ClaimMapping
from gateway.auth.jwks import IssuerKeys, JwksClient
from gateway.auth.jwt import JwtAuthenticator, JwtAuthenticators
from gateway.auth.keys import Authenticator, Identity, hash_key
from gateway.config.load import LoadedConfig, resolve_secret
from gateway.config.model import JwtSpec, PrincipalSpec
from gateway.config.upstream_auth import UpstreamAuthSpec
from gateway.core.durations import parse_duration
from gateway.policy.call import Principal
from gateway.upstreams.credentials import ClientCredentials, TokenExchange, UpstreamCredentials
from gateway.upstreams.token_client import TokenClient, TokenEndpoint

__all__ = ["build_authenticator", "build_jwt", "build_notifier", "build_upstream_credentials"]


def build_jwt(specs: list[JwtSpec], engine: str = "auto", refused: Callable[[str], None] | None = None,
              client: JwksClient | None = None) -> JwtAuthenticators | None:
    """The authenticators of ``auth.jwt`` (None without entries); ``refused`` is told each refusal's reason."""
    if not specs:
        return None
    client = client or JwksClient()
    authenticators = []
    for spec in specs:
        mapping = ClaimMapping(id=spec.principal.id, groups=spec.principal.groups, claims=spec.principal.claims,
                               rules=[(r.expression, r.message) for r in spec.rules],
                               roles=spec.roles.model_dump(), engine=engine)
        keys = IssuerKeys(spec.issuer, spec.jwks_uri, spec.algorithms, parse_duration(spec.jwks_max_age), client)
        authenticators.append(JwtAuthenticator(spec.issuer, spec.audiences, spec.algorithms,
                                               parse_duration(spec.clock_skew), keys, mapping, spec.required_scopes))
    return JwtAuthenticators(authenticators, client, refused)


def build_authenticator(config: LoadedConfig, refused: Callable[[str], None] | None = None) -> Authenticator:
    """The API keys of the config (hashed here: a key read from env or file is never kept), its identity
    providers (``refused`` counts their refusals) and its anonymous principal, if any."""
    spec = config.spec.auth

    def principal(p: PrincipalSpec) -> Principal:
        return Principal(p.id, tuple(p.groups), dict(p.claims))

    keys = [(key.sha256 or hash_key(resolve_secret(key.key, config.base)),  # type: ignore[arg-type]
             Identity(principal(key.principal), key.approver, key.admin, key.metrics)) for key in spec.api_keys]
    anonymous = None
    if spec.anonymous:
        a = spec.anonymous
        anonymous = Identity(Principal(a.id, tuple(a.groups), dict(a.claims), kind="anonymous"))
    return Authenticator(keys, anonymous, build_jwt(spec.jwt, config.spec.engine, refused))


def build_notifier(config: LoadedConfig, page_url: str) -> WebhookNotifier:
    """A notifier for the config's ``approvals.webhooks``; secrets are read now, failing loudly."""
    webhooks = []
    for i, spec in enumerate(config.spec.approvals.webhooks):
        try:
            secret = None if spec.secret is None else resolve_secret(spec.secret, config.base)
            if secret is not None:
                signing_key(secret)
        except ValueError as exc:
            raise ValueError(f"approvals.webhooks[{i}].secret ({spec.url}): {exc}") from None
        webhooks.append(Webhook(spec.url, secret, spec.events))
    return WebhookNotifier(webhooks, page_url)


def build_upstream_credentials(auth: UpstreamAuthSpec | None, upstream: str,
                               config: LoadedConfig) -> UpstreamCredentials | None:
    """The token source an upstream's ``auth:`` names (its client secret read now), or None without one."""
    if auth is None:
        return None
    grant = auth.grant
    endpoint = TokenEndpoint(grant.client_id, resolve_secret(grant.client_secret, config.base), grant.token_url,
                             grant.issuer, grant.auth_method)
    client = TokenClient(endpoint, upstream)
    if auth.token_exchange is not None:
        return TokenExchange(client, upstream, audience=grant.audience, resource=grant.resource,
                             scopes=tuple(grant.scopes), requested_token_type=auth.token_exchange.requested_token_type)
    return ClientCredentials(client, audience=grant.audience, resource=grant.resource, scopes=tuple(grant.scopes))
