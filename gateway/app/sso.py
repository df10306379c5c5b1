"""Single sign-on for the approvals page, built from ``approvals.sso`` (the composition root's part of it)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.auth.sso import IdTokenChecker, OidcClient, OidcFlow, SignIns
from gateway.auth.sso_sessions import Sessions
from gateway.config.load import LoadedConfig, resolve_secret
from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError
from gateway.frontends.sso import SsoPages

__all__ = ["build_sso"]


def build_sso(config: LoadedConfig, checker: IdTokenChecker | None,
              refused: Callable[[str], None] | None = None) -> SsoPages | None:
    """The sign-in pages for the config's ``approvals.sso`` (None when it is not set); its secret is read now.
    ``refused`` is told the reason of each refused sign-in (for /metrics)."""
    sso = config.spec.approvals.sso
    if sso is None:
        return None
    if checker is None:  # the loader checks the issuer is an auth.jwt issuer: this is a gateway without one
        raise ConfigError([Diagnostic("sso-unknown-issuer", "approvals.sso needs auth.jwt", str(config.file))])
    try:
        secret = None if sso.client_secret is None else resolve_secret(sso.client_secret, config.base)
    except ValueError as exc:
        raise ConfigError([Diagnostic("secret-missing", f"approvals.sso.client_secret: {exc}",
                                      str(config.file))]) from None
    client = OidcClient(sso.issuer.rstrip("/"), sso.client_id, secret, tuple(sso.scopes), sso.token_auth_method)
    return SsoPages(OidcFlow(client, checker), SignIns(), Sessions(sso.lifetime_seconds()), sso.display_name(),
                    config.spec.approvals.public_url, refused=refused)
