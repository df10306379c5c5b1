"""What the config tests share: a config file written into a folder with one policy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

POLICY = "policy: p\nrules: [{id: r, action: allow}]\n"


@pytest.fixture
def config(tmp_path: Path) -> Callable[[str], Path]:
    """``config(text)`` writes gateway.yaml (and a policy dir) and returns its path."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICY)

    def write(text: str) -> Path:
        path = tmp_path / "gateway.yaml"
        path.write_text(text)
        return path
    return write
