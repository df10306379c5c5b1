"""The ``WWW-Authenticate`` of every refused credential: what to send, and where to learn how to get it.

    no credential            401  Bearer realm="gateway"[, scope=…][, resource_metadata=…]
    a credential refused     401  … error="invalid_token" …          (RFC 6750 section 3.1)
    two credentials          400  … error="invalid_request" …
    a token lacking a scope  403  … error="insufficient_scope", scope="<all it needs, the missing ones too>" …

``resource_metadata`` (RFC 9728 section 5.1) is the URL of the protected resource metadata when
`auth.resource_metadata` is configured: MCP clients start their OAuth discovery from it. It and the
scope are built from the config once, never from the request (a Host header must not be able to
point a client at another server's metadata). On a 401 the scope is what a client should ask for at
first (`scopes_supported` and the advertised issuers' `required_scopes`); on a 403 the same, with the scopes
the token lacked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.core.errors import CredentialError, TokenRefused

__all__ = ["PLAIN", "Challenge", "presents_credential"]


def presents_credential(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request sent a credential at all (refused or not): then a 401 says ``invalid_token``."""
    return any(name.lower() in (b"authorization", b"x-api-key") for name, _ in headers)


@dataclass(frozen=True, slots=True)
class Challenge:
    """The challenge parameters this gateway always adds (plain values from the composition root)."""

    resource_metadata: str | None = None  # the metadata document's URL, when configured
    scope: str | None = None  # space-separated: what to ask for at first

    def header(self, exc: CredentialError | None, presented: bool) -> bytes:
        """The ``WWW-Authenticate`` value refusing ``exc`` (None: no usable credential; ``presented``: one was sent)."""
        params = ['realm="gateway"']
        scope = self.scope
        if isinstance(exc, TokenRefused) and exc.reason == "insufficient-scope":
            params.append('error="insufficient_scope"')
            # every scope this resource needs, the missing ones among them: a client that asks for only
            # what the challenge names (2025-11-25 allows it) keeps the scopes it had
            scope = " ".join(dict.fromkeys([*(scope or "").split(), *exc.scope.split()]))
        elif exc is not None and exc.status == 400:
            params.append('error="invalid_request"')
        elif exc is not None or presented:
            params.append('error="invalid_token"')
        if scope:
            params.append(f'scope="{_quotable(scope)}"')
        if self.resource_metadata is not None:
            params.append(f'resource_metadata="{self.resource_metadata}"')
        return ("Bearer " + ", ".join(params)).encode("ascii")


def _quotable(text: str) -> str:
    """Scope tokens never hold a quote, a backslash or a control character (RFC 6749 section 3.3); drop any."""
    return "".join(c for c in text if " " <= c <= "~" and c not in '"\\')


PLAIN = Challenge()  # a gateway without `auth.resource_metadata`: the scheme and the error, nothing to discover
