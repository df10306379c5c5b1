"""Headless Chromium for the tests that need a browser (driven by Playwright; Debian's chromium, never a download).

    needs_browser      skip marker when playwright or /usr/bin/chromium is missing
    chromium_page()    ``async with chromium_page() as (page, errors)``: a fresh browser and page that reaches
                       nothing but loopback (any other request is aborted, so an IdP page's web fonts never
                       leave the machine); ``errors`` collects script errors of pages on ``watch`` origins;
                       keyword arguments are the browser context's (``viewport``, ``color_scheme``, ...)

Imported by name (``from browser_support import ...``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.async_api import Page, async_playwright
except ImportError:  # CI installs it with the `test` extra
    async_playwright = None  # type: ignore[assignment]

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "WAIT_MS", "chromium_page", "needs_browser"]

CHROMIUM = Path("/usr/bin/chromium")
# The flags this machine needs: no sandbox as root, and no background traffic to a closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 15_000  # what a page should show appears well within this, on a loaded machine too
_LOOPBACK = re.compile(r"^https?://(127\.0\.0\.1|localhost)(:\d+)?/")

needs_browser = pytest.mark.skipif(
    async_playwright is None or not CHROMIUM.exists(),
    reason="needs playwright (pip install -e '.[test]') and Debian's chromium at /usr/bin/chromium"
           " (bash .ci/install-system)")


@contextlib.asynccontextmanager
async def chromium_page(watch: Sequence[str] = (), **context_options: Any) -> AsyncIterator[tuple[Page, list[str]]]:
    """A page in a fresh headless Chromium; ``errors`` lists script errors and failed scripts on ``watch`` origins."""
    assert async_playwright is not None
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(**context_options)
            await context.route(lambda url: not _LOOPBACK.match(url), lambda route: route.abort())
            page = await context.new_page()
            page.set_default_timeout(WAIT_MS)

            def watched(where: Any) -> bool:
                return any(str(where).startswith(origin) for origin in watch)

            page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}") if watched(page.url) else None)
            page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error"
                    and watched(page.url) and "the server responded with a status of" not in msg.text else None)
            yield page, errors
        finally:
            await browser.close()
