"""The model proxy: ``POST /v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``, each to an upstream of
the same API, every tool call the model makes decided by the policies (docs/model-proxy.md)."""

from __future__ import annotations

from gateway.models.proxy import ModelProxy, ModelRoute

__all__ = ["ModelProxy", "ModelRoute"]
