"""The part of the composition root that reads `auth.resource_metadata`: the gateway as an OAuth protected resource."""

from __future__ import annotations

from gateway.config.load import LoadedConfig
from gateway.frontends.protected_resource import ProtectedResource

__all__ = ["build_protected_resource"]


def build_protected_resource(config: LoadedConfig) -> ProtectedResource | None:
    """The RFC 9728 metadata of `auth.resource_metadata` as plain values, or None when it is not configured."""
    spec = config.spec.auth.resource_metadata
    if spec is None:
        return None
    return ProtectedResource(
        spec.resource, tuple(spec.authorization_servers),
        None if spec.scopes_supported is None else tuple(spec.scopes_supported),
        spec.resource_name, spec.resource_documentation, spec.resource_policy_uri, spec.resource_tos_uri)
