"""Read `gateway.yaml`: parse → validate → resolve paths and secrets, every error positioned."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gateway.config.identity import jwt_problems
from gateway.config.identity_checks import auth_problems, sso_problems
from gateway.config.model import GatewayConfig, SecretRef
from gateway.config.protected_resource import resource_metadata_problems
from gateway.core.diagnostics import Diagnostic
from gateway.core.durations import parse_duration
from gateway.core.errors import ConfigError
from gateway.core.sourcemap import YamlDocument
from gateway.core.validation import validate_document
from gateway.policy.call import JWT_KEY_PREFIX
from gateway.policy.load import read_document

__all__ = ["LoadedConfig", "check_config", "load_config", "resolve_secret"]

# Header names whose values are credentials: a literal value for one of these is refused.
_SECRET_HEADER = re.compile(r"(?i)authorization|token|secret|api[-_]?key|cookie|password")


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and the directory its relative paths are read from."""

    spec: GatewayConfig
    file: Path
    document: YamlDocument

    @property
    def base(self) -> Path:
        """The config file's directory."""
        return self.file.parent

    def path(self, value: str) -> Path:
        """A config path, relative to the config file's directory."""
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else self.base / p

    def policy_paths(self) -> list[Path]:
        """Where the policies are."""
        return [self.path(p) for p in self.spec.policies]

    @property
    def call_timeout(self) -> float:
        """Seconds a tool call may take upstream."""
        return parse_duration(self.spec.limits.call_timeout)


def resolve_secret(value: str | SecretRef, base: Path) -> str:
    """The secret's value; raises ValueError naming what is missing."""
    if isinstance(value, str):
        return value
    if value.env is not None:
        found = os.environ.get(value.env)
        if found is None:
            raise ValueError(f"environment variable {value.env} is not set")
        return found
    assert value.file is not None
    path = Path(value.file) if Path(value.file).is_absolute() else base / value.file
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read secret file {path}: {exc.strerror}") from None


def check_config(file: str | Path, *, fetch_specs: bool = False) -> tuple[LoadedConfig | None, list[Diagnostic]]:
    """Load and check a config; None when anything is wrong.

    ``fetch_specs``: also fetch OpenAPI specs given as URLs (`gateway check` does; serving fetches
    them when each upstream starts).
    """
    path = Path(file)
    doc, problems, _ = read_document(path)
    if doc is None:
        return None, problems
    if doc.data is None:
        doc.data = {}
    spec, more = validate_document(GatewayConfig, doc)
    problems = [*problems, *more]
    if spec is None:
        return None, problems
    loaded = LoadedConfig(spec, path.resolve(), doc)
    problems.extend(_semantic_problems(loaded, fetch_specs))
    return (None if problems else loaded), problems


def load_config(file: str | Path) -> LoadedConfig:
    """Load a config or raise ``ConfigError`` with every diagnostic."""
    loaded, problems = check_config(file)
    if loaded is None:
        raise ConfigError(problems)
    return loaded


def _secrets(value: Any, path: tuple[str | int, ...]) -> list[tuple[tuple[str | int, ...], SecretRef]]:
    """Every secret reference in the config, with where it is."""
    if isinstance(value, SecretRef):
        return [(path, value)]
    found: list[tuple[tuple[str | int, ...], SecretRef]] = []
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found.extend(_secrets(getattr(value, name), (*path, name)))
    elif isinstance(value, dict):
        for key, item in value.items():
            found.extend(_secrets(item, (*path, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(_secrets(item, (*path, i)))
    return found


def _semantic_problems(cfg: LoadedConfig, fetch_specs: bool) -> list[Diagnostic]:
    from gateway.upstreams.openapi_spec import is_url  # upstream code stays out of plain config loading

    doc, spec = cfg.document, cfg.spec
    out: list[Diagnostic] = []

    def err(path: tuple[str | int, ...], code: str, message: str, hint: str | None = None) -> None:
        pos = doc.position(path)
        out.append(Diagnostic(code, message, str(cfg.file), pos.line, pos.column, hint=hint))

    seen: dict[str, int] = {}
    for i, up in enumerate(spec.upstreams):
        if up.name in seen:
            err(("upstreams", i, "name"), "duplicate-upstream", f"upstream name {up.name!r} is used twice",
                "give every upstream a unique name")
        seen[up.name] = i
        kind = up.kind
        headers: dict[str, Any] = getattr(getattr(up, kind), "headers", {})
        for name, value in headers.items():
            if isinstance(value, str) and _SECRET_HEADER.search(name):
                err(("upstreams", i, kind, "headers", name), "secret-literal",
                    f"header {name!r} holds a credential written into the config",
                    "write it as {env: VARIABLE} or {file: PATH}")
        if up.openapi is not None and not is_url(up.openapi.spec) and not cfg.path(up.openapi.spec).is_file():
            err(("upstreams", i, "openapi", "spec"), "not-found", f"OpenAPI spec {up.openapi.spec!r} not found",
                f"the path is read relative to {cfg.base}")
        elif up.openapi is not None:
            from gateway.upstreams.openapi import check_openapi  # the spec's own errors, before serve

            for d in check_openapi(up.name, up.openapi, cfg.base, fetch=fetch_specs):
                if d.code == "openapi-unreachable":  # said at the config's `spec:` line
                    err(("upstreams", i, "openapi", "spec"), d.code, f"upstream {up.name!r}: {d.message}", d.hint)
                else:
                    out.append(d)
    auth_problems(spec.upstreams, len(spec.auth.jwt), err)
    for path, ref in _secrets(spec, ()):
        try:
            resolve_secret(ref, cfg.base)
        except ValueError as exc:
            err(path, "secret-missing", str(exc), "set the variable or create the file before starting the gateway")
    _identity_problems(cfg, out, err)
    for i, p in enumerate(spec.policies):
        if not cfg.path(p).exists():
            err(("policies", i), "not-found", f"policy path {p!r} not found", f"paths are relative to {cfg.base}")
    return out


def _identity_problems(cfg: LoadedConfig, out: list[Diagnostic], err: Callable[..., None]) -> None:
    """Token authenticators, protected-resource metadata, approvers' sign-in and reserved principal ids."""
    doc, spec = cfg.document, cfg.spec
    out.extend(jwt_problems(spec.auth.jwt, doc, cfg.file, spec.engine))
    out.extend(resource_metadata_problems(spec.auth.resource_metadata, spec.auth.jwt, doc, cfg.file))
    for where, code, message, hint in sso_problems(spec):
        err(where, code, message, hint)
    for path in _reserved_principal_ids(spec):
        err(path, "reserved-principal-id", f"a principal id may not start with {JWT_KEY_PREFIX!r}: the gateway"
            " keeps it for principals recognised by a token", f"name the principal without the {JWT_KEY_PREFIX!r}"
            " prefix")


def _reserved_principal_ids(spec: GatewayConfig) -> list[tuple[str | int, ...]]:
    """Where the config names a principal whose id a token's binding key could take (``Principal.key``)."""
    found: list[tuple[tuple[str | int, ...], str]] = [
        (("auth", "api_keys", i, "principal", "id"), key.principal.id) for i, key in enumerate(spec.auth.api_keys)]
    if spec.auth.anonymous is not None:
        found.append((("auth", "anonymous", "id"), spec.auth.anonymous.id))
    return [path for path, principal_id in found if principal_id.startswith(JWT_KEY_PREFIX)]
