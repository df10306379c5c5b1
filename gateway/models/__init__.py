"""The model proxy: an OpenAI-compatible ``POST /v1/chat/completions`` whose tool calls go through the policies."""

from __future__ import annotations

from gateway.models.proxy import ModelProxy, ModelRoute

__all__ = ["ModelProxy", "ModelRoute"]
