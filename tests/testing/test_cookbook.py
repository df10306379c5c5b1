"""The policy cookbook: at least ten patterns, each with a suite that passes on both engines, and the
doc shows each file exactly as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import Status, run_tests

ROOT = Path(__file__).resolve().parents[2]
COOKBOOK = ROOT / "policies" / "cookbook"


@pytest.mark.both_engines
def test_every_pattern_has_a_passing_suite(engine: str) -> None:
    patterns = sorted(p for p in COOKBOOK.iterdir() if p.is_dir())
    assert len(patterns) >= 10
    for pattern in patterns:
        run = run_tests([pattern], engine)
        assert run.exit_code == 0, [(c.name, c.problems) for c in run.cases if c.status is not Status.PASS]
        assert len(run.cases) >= 3, pattern.name


def test_the_doc_shows_the_files_as_they_are() -> None:
    doc = (ROOT / "docs" / "cookbook.md").read_text()
    for file in sorted(COOKBOOK.rglob("*.yaml")):
        assert file.read_text().rstrip() in doc, f"docs/cookbook.md is out of date for {file.relative_to(ROOT)}"
