"""The composition root: the only place that reads config models and secrets and builds components from
them (docs/architecture.md)."""

from __future__ import annotations

from gateway.app.credentials import build_authenticator, build_notifier
from gateway.app.root import (
    build_app,
    build_gateway,
    build_model_proxy,
    build_registry,
    build_store,
    build_supervisor,
    build_upstream,
    server_options,
)

__all__ = ["build_app", "build_authenticator", "build_gateway", "build_model_proxy", "build_notifier",
           "build_registry", "build_store", "build_supervisor", "build_upstream", "server_options"]
