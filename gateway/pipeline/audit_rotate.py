"""Rotation of the decision log by size (``audit.rotate``): ``FILE`` becomes ``FILE.1``, and the chain goes on.

As logrotate numbers them: ``FILE.1`` is the newest rotated file, ``FILE.2`` the one before it, and so on;
each rotation renames ``FILE.k`` to ``FILE.k+1`` (oldest first) and ``FILE`` to ``FILE.1``, and removes
those past ``keep`` when it is set. The writer keeps its chain's head in memory, so the first event of the
new ``FILE`` names the last event of ``FILE.1``; that is also why a rename by anyone else keeps the chain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Rotation", "rotate_files", "rotated_name"]


@dataclass(frozen=True, slots=True)
class Rotation:
    """Rotate the file before a write would take it past ``max_bytes``; keep ``keep`` rotated files (None: all, ≥ 1)."""

    max_bytes: int
    keep: int | None = None

    def due(self, size: int, incoming: int) -> bool:
        """Whether a file of ``size`` bytes is rotated before ``incoming`` more (never an empty one)."""
        return size > 0 and size + incoming > self.max_bytes


def rotated_name(path: Path, number: int) -> Path:
    """``FILE.number``, beside ``FILE``."""
    return path.with_name(f"{path.name}.{number}")


def rotate_files(path: Path, keep: int | None) -> None:
    """``FILE.k`` → ``FILE.k+1`` for each rotated file (those past ``keep`` removed), then ``FILE`` → ``FILE.1``."""
    last = 0
    while os.path.lexists(rotated_name(path, last + 1)):
        last += 1
    for number in range(last, 0, -1):
        if keep is not None and number >= keep:
            os.unlink(rotated_name(path, number))
        else:
            os.rename(rotated_name(path, number), rotated_name(path, number + 1))
    os.rename(path, rotated_name(path, 1))
