"""The options `gateway test --coverage` adds (the report itself is gateway.testing.coverage)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def _percent(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError("a percentage from 0 to 100")
    return value


def register(test: argparse.ArgumentParser) -> None:
    """Add --coverage and --fail-under to `gateway test`."""
    test.add_argument("--coverage", action="store_true",
                      help="list the rules (and top-level parts of `when`) that no case exercised")
    test.add_argument("--fail-under", type=_percent, metavar="N",
                      help="with --coverage: exit 1 when fewer than N%% of the rules were exercised")
