"""The shipped packs (policies/*/, not the cookbook): each passes its suites on both engines, and its README
names every rule and every env key it reads; the information-flow pack's suites test whole runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gateway.testing import Status, run_tests

ROOT = Path(__file__).resolve().parents[2]
PACKS = sorted(p for p in (ROOT / "policies").iterdir() if p.is_dir() and p.name != "cookbook")
FLOW = ROOT / "policies" / "information-flow"


def _policy_files(pack: Path) -> list[Path]:
    return sorted(p for p in pack.glob("*.yaml") if not p.name.endswith("_test.yaml"))


@pytest.mark.both_engines
@pytest.mark.parametrize("pack", PACKS, ids=[p.name for p in PACKS])
def test_every_pack_passes_its_suites(engine: str, pack: Path) -> None:
    run = run_tests([pack], engine)
    assert run.exit_code == 0, [(c.name, c.problems) for c in run.cases if c.status is not Status.PASS]
    assert len(run.cases) >= 5, pack.name


@pytest.mark.parametrize("pack", PACKS, ids=[p.name for p in PACKS])
def test_every_pack_documents_its_rules_and_env_keys(pack: Path) -> None:
    readme = (pack / "README.md").read_text(encoding="utf-8")
    for file in _policy_files(pack):
        text = file.read_text(encoding="utf-8")
        policy = yaml.safe_load(text)
        for rule in policy["rules"]:
            assert f"`{policy['policy']}/{rule['id']}`" in readme, f"{pack.name}/README.md: rule {rule['id']}"
        for key in sorted(set(re.findall(r"\benv\.([A-Za-z_][A-Za-z0-9_]*)", text))):
            assert f"`{key}`" in readme, f"{pack.name}/README.md: env key {key}"


def test_the_information_flow_suites_run_whole_sequences() -> None:
    suites = sorted(FLOW.glob("*_test.yaml"))
    assert [s.name for s in suites] == ["recipients_test.yaml", "secrets_test.yaml", "spend_test.yaml",
                                        "untrusted_test.yaml"]
    for suite in suites:
        cases = yaml.safe_load(suite.read_text(encoding="utf-8"))["cases"]
        sequences = [c for c in cases if len(c.get("steps") or []) >= 2]
        assert len(sequences) >= 2, suite.name
        assert any("expect_run" in c for c in sequences), suite.name
