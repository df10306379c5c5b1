"""A declarative policy gateway between AI agents and the tools they call."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
