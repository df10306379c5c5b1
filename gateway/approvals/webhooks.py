"""Placeholder until webhook delivery lands (being written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class WebhookNotifier:
    """Placeholder."""

    @classmethod
    def from_specs(cls, specs: list[Any], base: Path, page_url: str) -> WebhookNotifier:
        """Placeholder."""
        return cls()

    def notify(self, event: str, approval: Any) -> None:
        """Placeholder."""

    async def aclose(self) -> None:
        """Placeholder."""
