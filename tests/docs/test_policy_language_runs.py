"""The run-aware examples of docs/policy-language.md (§6, and §7's sequences) and the README load and do what they say.

Every YAML block of §6 is loaded as the gateway loads it, on both CEL engines (a block of rules alone joins the
section's first file, whose tallies it reads); the misspelt tally the page shows is reported exactly as the page
prints it; and §7's sequence cases pass `gateway test` against §6's file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run_cli

from gateway.core.errors import PolicyLoadError
from gateway.policy import load_policy_set
from gateway.policy.load import check_policies

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "policy-language.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
_FENCE = re.compile(r"```yaml\n(.*?)```", re.S)
ENGINES = ("cel-expr-python", "cel-python")


def section(start: str, end: str) -> str:
    """The page's text from the heading ``start`` up to the heading ``end``."""
    begin = PAGE.index(start)
    return PAGE[begin:PAGE.index(end, begin)]


RUNS = section("## 6. Run-aware policies", "## 7. Testing policies")
SEQUENCES = section("### Sequences: `steps:`", "### Running")


def flows_file() -> dict[str, Any]:
    """§6's first block: the whole `flows` policy."""
    doc = yaml.safe_load(_FENCE.findall(RUNS)[0])
    assert doc["policy"] == "flows" and doc["tallies"] and doc["rules"]
    return doc


def policy_files(tmp_path: Path) -> list[Path]:
    """§6's blocks as policy files: the whole file first, then each list of rules in a file of its own."""
    paths = []
    for index, block in enumerate(_FENCE.findall(RUNS)):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "policies" in doc:
            continue  # a gateway config (the pack's usage window), not a policy
        if isinstance(doc, list):
            doc = {"policy": f"example-{index}", "rules": doc}
        path = tmp_path / f"block-{index}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        paths.append(path)
    assert len(paths) >= 4, "the file, the label rules, the recipient cap, the history rules"
    return paths


@pytest.mark.parametrize("engine", ENGINES)
def test_every_example_of_the_section_loads(tmp_path: Path, engine: str) -> None:
    assert flows_file()["policy"] == "flows"
    first, *rest = policy_files(tmp_path)
    for path in rest:  # each block of rules with the file whose tallies it reads
        try:
            load_policy_set([first, path], engine=engine)
        except PolicyLoadError as exc:
            raise AssertionError(f"{path.read_text()}\n{[d.format() for d in exc.diagnostics]}") from exc


def test_the_readme_example_loads(tmp_path: Path) -> None:
    [block] = [b for b in _FENCE.findall(README) if b.startswith("policy: flows")]
    path = tmp_path / "flows.yaml"
    path.write_text(block)
    policy_set = load_policy_set([path])
    assert [t.id for t in policy_set.tallies] == ["transferred"]


def test_a_misspelt_tally_is_reported_as_the_page_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shown = re.search(r"```\n(policies/flows\.yaml:\d+:\d+: error\[cel-field\]: .*)\n```", RUNS)
    assert shown is not None, "the page shows the error of a misspelt tally"
    source = _FENCE.findall(RUNS)[0]
    wrong = source.replace("session.tallies.transferred + double", "session.tallies.transfered + double", 1)
    assert wrong != source
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "flows.yaml").write_text(wrong)
    monkeypatch.chdir(tmp_path)
    policy_set, diagnostics = check_policies(["policies/flows.yaml"])
    assert policy_set is None
    assert [d.format() for d in diagnostics if d.code == "cel-field"] == [shown.group(1)]


def test_the_sequences_pass_against_the_sections_file(tmp_path: Path) -> None:
    (tmp_path / "flows.yaml").write_text(_FENCE.findall(RUNS)[0])
    suites, *more_cases = (yaml.safe_load(b) for b in _FENCE.findall(SEQUENCES))
    suite = {"suite": "runs", "policies": ["flows.yaml"], **suites}
    suite["cases"] += [case for cases in more_cases for case in cases]  # the blocks of cases alone
    assert any("steps" in case for case in suite["cases"]) and any("call" in case for case in suite["cases"])
    (tmp_path / "runs_test.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    done = run_cli(tmp_path, "test", "runs_test.yaml", "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(suite['cases'])} passed, 0 failed" in done.stdout
