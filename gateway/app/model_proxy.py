"""The model proxy built from `models:` (docs/model-proxy.md): one route per entry, its upstream in the entry's API."""

from __future__ import annotations

from gateway.config.load import LoadedConfig, resolve_secret
from gateway.core.diagnostics import Diagnostic
from gateway.core.durations import parse_duration
from gateway.core.errors import ConfigError
from gateway.models import ModelProxy, ModelRoute
from gateway.models.dialects.registry import dialect
from gateway.models.upstream import ModelUpstream
from gateway.pipeline import Gateway

__all__ = ["build_model_proxy"]


def build_model_proxy(config: LoadedConfig, gateway: Gateway) -> ModelProxy:
    """The model proxy (docs/model-proxy.md) for `models:`; without entries it serves nothing."""
    routes = []
    for spec in config.spec.models:
        try:
            key = resolve_secret(spec.api_key, config.base) if spec.api_key is not None else None
        except ValueError as exc:
            raise ConfigError([Diagnostic("model-key", f"model {spec.name!r}: {exc}", str(config.file))]) from None
        try:
            api = dialect(spec.api)
        except LookupError as exc:
            raise ConfigError([Diagnostic("model-api", f"model {spec.name!r}: {exc}", str(config.file))]) from None
        upstream = ModelUpstream(spec.base_url.rstrip("/") + api.path, api.upstream_headers(key), key,
                                 parse_duration(spec.timeout))
        routes.append(ModelRoute(
            spec.name, upstream, spec.model, tuple(spec.gateway_tools), spec.tool_concurrency, spec.max_turns,
            0.0 if spec.approval == "answer" else parse_duration(spec.approval_wait),
            None if spec.client_tools is None else tuple(spec.client_tools), spec.api))
    return ModelProxy(gateway, routes)
