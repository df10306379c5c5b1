"""The part of the composition root that reads `auth.resource_metadata`: the gateway as an OAuth protected resource."""

from __future__ import annotations

from gateway.config.load import LoadedConfig
from gateway.frontends.protected_resource import ProtectedResource

__all__ = ["build_protected_resource"]


def build_protected_resource(config: LoadedConfig) -> ProtectedResource | None:
    """The RFC 9728 metadata of `auth.resource_metadata` as plain values, or None when it is not configured.

    A 401 asks for the advertised scopes and every scope the advertised issuers require (`required_scopes`):
    clients ask for what the 401 names first, so their first token is one the gateway accepts. A token that
    lacks one anyway (granted before a scope became required) gets the 403 that names it.
    """
    auth = config.spec.auth
    spec = auth.resource_metadata
    if spec is None:
        return None
    required = [scope for issuer in auth.jwt if issuer.issuer in spec.authorization_servers
                for scope in issuer.required_scopes]
    asked = tuple(dict.fromkeys([*(spec.scopes_supported or []), *required]))
    return ProtectedResource(
        spec.resource, tuple(spec.authorization_servers),
        None if spec.scopes_supported is None else tuple(spec.scopes_supported),
        spec.resource_name, spec.resource_documentation, spec.resource_policy_uri, spec.resource_tos_uri,
        challenge_scopes=asked)
