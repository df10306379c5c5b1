"""Placeholder until the approvals page lands (being written)."""

from __future__ import annotations

from starlette.routing import Route


def approvals_page_routes() -> list[Route]:
    """No page yet."""
    return []
