"""The tool-poisoning pack's README states what corpus/score.py computes, on both engines, so its figures
cannot go stale; and the corpus is what the README says it is: at least 100 real tools from several MCP
servers' listings and at least 30 poisoned ones, every family of the pack among them."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "tool-poisoning"
README = (PACK / "README.md").read_text(encoding="utf-8")


def _score_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tool_poisoning_score", PACK / "corpus" / "score.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


SCORE = _score_module()


def _stated() -> str:
    found = re.search(r"<!-- score:begin -->\n(.*?)<!-- score:end -->", README, re.S)
    assert found, "README.md has no score block"
    return found.group(1)


@pytest.mark.both_engines
def test_the_readme_states_the_figures_score_py_computes(engine: str) -> None:
    result = SCORE.score(engine)
    assert SCORE.markdown(result) == _stated(), "run: python policies/tool-poisoning/corpus/score.py --markdown"


@pytest.mark.both_engines
def test_no_clean_tool_is_refused_and_only_the_evasions_are_missed(engine: str) -> None:
    result = SCORE.score(engine)
    assert [j.entry["name"] for j in result.false_positives] == []
    assert {j.entry["family"] for j in result.misses} <= {"evasion"}
    # a tool is refused exactly when it is hidden: the rules read only the tool and env
    assert all(j.refused == j.hidden for j in result.clean + result.poisoned)


def test_the_corpus_is_large_and_varied_enough() -> None:
    clean = json.loads((PACK / "corpus" / "clean.json").read_text(encoding="utf-8"))
    poisoned = json.loads((PACK / "corpus" / "poisoned.json").read_text(encoding="utf-8"))
    assert len(clean) >= 100 and len({t["server"] for t in clean}) >= 10
    assert all(t["description"] and isinstance(t["inputSchema"], dict) for t in clean)
    assert len(poisoned) >= 30 and len({p["id"] for p in poisoned}) == len(poisoned)
    families = {p["family"] for p in poisoned}
    assert {"unicode-tags", "zero-width", "bidi", "instruction-block", "ignore-instructions", "hide-from-user",
            "side-task", "link", "evasion"} <= families
    for server in ("server-everything", "server-filesystem", "server-memory", "mcp-server-git", "mcp-server-fetch"):
        assert any(t["server"].endswith(server) for t in clean), server


def test_every_rule_of_the_pack_catches_some_poisoned_tool() -> None:
    result = SCORE.score()
    rules = {f"tool-poisoning/{r}" for r in re.findall(r"^  - id: (\S+)", (PACK / "tool-poisoning.yaml").read_text(),
                                                       re.M)}
    assert {j.rule for j in result.poisoned if j.refused} == rules
