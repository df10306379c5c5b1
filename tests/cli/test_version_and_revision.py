"""`gateway --version`, and a policy revision that depends on the files, not on how their path is spelled."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.policy.load import check_policies

POLICY = "policy: p\nrules:\n  - id: r\n    when: args.x == 1\n    action: reject\n"


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "gateway", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gateway {importlib.metadata.version('agent-policy-gateway')}\n"


def _revision(path: str | Path) -> str:
    policy_set, diagnostics = check_policies([path], "cel-python")
    assert policy_set is not None, diagnostics
    return policy_set.revision


def test_the_revision_is_the_same_however_the_path_is_spelled(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo" / "policies"
    (root / "team").mkdir(parents=True)
    (root / "a.yaml").write_text(POLICY.replace("policy: p", "policy: a"))
    (root / "team" / "b.yaml").write_text(POLICY.replace("policy: p", "policy: b"))
    os.symlink(root, tmp_path / "linked")
    monkeypatch.chdir(tmp_path / "repo")
    spellings = ["policies", "./policies", "policies/", str(root), str(tmp_path / "linked"),
                 "../repo/policies", "./policies/./"]
    revisions = {spelling: _revision(spelling) for spelling in spellings}
    assert len(set(revisions.values())) == 1, revisions

    # a file checked alone has the same revision wherever it is named from
    assert _revision("policies/a.yaml") == _revision(root / "a.yaml") == _revision(tmp_path / "linked" / "a.yaml")

    # and the revision still follows the contents and the names below the root
    before = _revision("policies")
    (root / "team" / "b.yaml").write_text(POLICY.replace("policy: p", "policy: b").replace("== 1", "== 2"))
    changed = _revision("policies")
    assert changed != before
    (root / "team" / "b.yaml").rename(root / "team" / "c.yaml")
    assert _revision("policies") not in (before, changed)
