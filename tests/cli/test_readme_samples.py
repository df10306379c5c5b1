"""The README shows what the commands print for the files as they are, and links the gateway docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_test_sample_matches_the_quick_start(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    command = "gateway test examples/quickstart/policies -v"
    sample = re.search(rf"\$ {re.escape(command)}\n(.*?)```", README, re.S)
    assert sample is not None
    monkeypatch.chdir(ROOT)
    assert main(command.split()[1:]) == 0
    assert capsys.readouterr().out == sample.group(1)


def test_the_suite_excerpt_is_in_the_suite() -> None:
    excerpt = re.search(r"# examples/quickstart/policies/quickstart_test.yaml \(excerpt\)\n(.*?)```", README, re.S)
    assert excerpt is not None
    suite = (ROOT / "examples" / "quickstart" / "policies" / "quickstart_test.yaml").read_text()
    for line in excerpt.group(1).splitlines():
        assert line in suite.splitlines(), line


def test_the_docs_are_linked() -> None:
    for doc in ("docs/gateway.md", "docs/policy-language.md", "docs/cookbook.md"):
        assert f"]({doc})" in README
        assert (ROOT / doc).is_file()
