"""`auth.resource_metadata`: the gateway as an OAuth 2.1 protected resource (RFC 9728), for MCP clients.

MCP clients that speak OAuth learn from this where to get a token: the gateway's 401 names the
metadata document, the document names the authorization servers (the configured `auth.jwt` issuers)
and the scopes to ask for, and the client asks the authorization server for a token whose audience is
``resource`` (RFC 8707). So ``resource`` must be a URL clients can reach and every advertised issuer must
accept tokens for it: both are checked at load (``resource_metadata_problems``), with file:line:col.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gateway.config.identity import JwtSpec
from gateway.core.diagnostics import Diagnostic
from gateway.core.loopback import is_loopback
from gateway.core.sourcemap import YamlDocument
from gateway.core.strict import StrictModel

__all__ = ["ResourceMetadataSpec", "check_resource_url", "issuer_problems", "resource_metadata_problems"]

# RFC 3986's characters, nothing else: the URL goes into a quoted-string of WWW-Authenticate as it is,
# so a quote, a backslash, a space or a control character must never reach it.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
# RFC 6749 section 3.3 scope-token: printable ASCII but space, '"' and '\'
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
_DEFAULT_PORTS = {"https": 443, "http": 80}

Problem = tuple[tuple[str | int, ...], str, str, str]  # (path in the config, code, message, hint)


def check_resource_url(value: str, what: str = "the URL") -> str:
    """An absolute https URL (http only for a loopback host), in normal form, without query or fragment."""
    if not _URL_CHARS.fullmatch(value):
        raise ValueError(f"{what} may hold only URL characters (no spaces, quotes or backslashes)")
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute https:// URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"{what} must use https: http is allowed only for a loopback host (127.0.0.1, ::1,"
                         " localhost)")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{what} must not carry a user name or password")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError(f"{what} must not have a query or a fragment (RFC 8707 section 2)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{what} has a port that is not a number from 0 to 65535") from None
    # Tokens carry the resource as their audience and it is compared as text: one spelling only.
    netloc = parts.netloc.lower() if port != _DEFAULT_PORTS[parts.scheme] else parts.netloc.lower().rsplit(":", 1)[0]
    normal = f"{parts.scheme}://{netloc}{parts.path}"
    if normal != value:
        raise ValueError(f"{what} must be written in normal form: {normal!r} (lower-case host, no default port)")
    return value


def _check_scopes(scopes: list[str] | None) -> list[str] | None:
    for scope in scopes or []:
        if not _SCOPE_TOKEN.fullmatch(scope):
            raise ValueError(f"scope {scope!r} is not a scope token (RFC 6749 section 3.3: printable ASCII,"
                             " no spaces, quotes or backslashes)")
        if scope == "offline_access":
            raise ValueError("'offline_access' is not a scope of this resource: clients ask their authorization"
                             " server for refresh tokens themselves (MCP authorization, Refresh Tokens)")
    if scopes is not None and len(set(scopes)) != len(scopes):
        raise ValueError("a scope is listed twice")
    return scopes


class ResourceMetadataSpec(StrictModel):
    """RFC 9728 protected resource metadata, served at /.well-known/oauth-protected-resource (and /…/mcp)."""

    # The MCP endpoint's URL as clients reach it (e.g. https://gateway.example.com/mcp): the audience of
    # the tokens clients ask for, and where the metadata URL in each 401 is derived from.
    resource: str
    # Issuers of `auth.jwt` that clients may get tokens from (the first is the one most clients use).
    authorization_servers: list[str] = Field(min_length=1)
    # The scopes a client asks for at first (also the `scope` of each 401's challenge).
    scopes_supported: list[str] | None = None
    resource_name: str | None = Field(None, min_length=1, max_length=200)  # shown to people by some clients
    resource_documentation: str | None = None  # a page for people about using this gateway
    resource_policy_uri: str | None = None
    resource_tos_uri: str | None = None

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str) -> str:
        check_resource_url(value, "resource")
        if urlsplit(value).path in ("", "/"):
            raise ValueError("resource must be the MCP endpoint's URL, with its path (e.g."
                             " https://gateway.example.com/mcp)")
        return value

    @field_validator("authorization_servers")
    @classmethod
    def _servers(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("an authorization server is listed twice")
        return value

    @field_validator("resource_documentation", "resource_policy_uri", "resource_tos_uri")
    @classmethod
    def _page(cls, value: str | None) -> str | None:
        return None if value is None else check_resource_url(value)

    _scopes = field_validator("scopes_supported")(_check_scopes)


def resource_metadata_problems(spec: ResourceMetadataSpec | None, issuers: Sequence[JwtSpec], doc: YamlDocument,
                               file: Path) -> list[Diagnostic]:
    """``issuer_problems`` of `auth.resource_metadata` against `auth.jwt`, positioned in the config file."""
    if spec is None:
        return []
    audiences = {issuer.issuer: issuer.audiences for issuer in issuers}
    problems = issuer_problems(spec, audiences)
    # the advertised issuers' required scopes go into every challenge: each must be one scope token
    problems.extend((("auth", "jwt", i, "required_scopes", j), "challenge-scope",
                     f"required scope {scope!r} is not a scope token, and it is named in WWW-Authenticate",
                     "RFC 6749 section 3.3: printable ASCII without spaces, quotes or backslashes")
                    for i, issuer in enumerate(issuers) if issuer.issuer in spec.authorization_servers
                    for j, scope in enumerate(issuer.required_scopes) if not _SCOPE_TOKEN.fullmatch(scope))
    out = []
    for path, code, message, hint in problems:
        pos = doc.position(path)
        out.append(Diagnostic(code, message, str(file), pos.line, pos.column, hint=hint))
    return out


def issuer_problems(spec: ResourceMetadataSpec, audiences: Mapping[str, Sequence[str]]) -> list[Problem]:
    """What is wrong between `auth.resource_metadata` and `auth.jwt` (``audiences``: issuer → its audiences).

    Each advertised authorization server must be a configured issuer (a token from any other would be
    refused), and must accept ``resource`` as an audience (clients ask for tokens whose audience is
    ``resource``, RFC 8707: were it not accepted, every token they got would be refused).
    """
    out: list[Problem] = []
    where = ("auth", "resource_metadata")
    for i, server in enumerate(spec.authorization_servers):
        if server not in audiences:
            known = ", ".join(repr(issuer) for issuer in audiences) or "none"
            out.append(((*where, "authorization_servers", i), "resource-metadata-issuer",
                        f"authorization server {server!r} is not an issuer of auth.jwt (configured: {known})",
                        "list only issuers configured under auth.jwt, written exactly as their `issuer`"))
        elif spec.resource not in audiences[server]:
            out.append(((*where, "resource"), "resource-not-audience",
                        f"resource {spec.resource!r} is not among the audiences of issuer {server!r}: the tokens"
                        " clients get for it would all be refused",
                        f"add {spec.resource!r} to that issuer's `audiences` in auth.jwt"))
    return out
