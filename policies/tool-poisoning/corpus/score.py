"""Score the tool-poisoning pack on the corpus: false positives on clean.json, misses on poisoned.json.

    python policies/tool-poisoning/corpus/score.py [--engine auto|cel-expr-python|cel-python] [--markdown]

Each tool is decided as the gateway decides it, by the pack loaded with the loader `gateway test` uses:
a call of the tool at the request stage (refused or not) and the tool listing (``admits_tool``: listed
or hidden). A clean tool refused or hidden is a false positive; a poisoned one that is called or listed
is a miss. ``--markdown`` prints the figures as the pack's README shows them between its ``score``
markers (tests/testing/test_tool_poisoning_corpus.py holds the two equal).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.policy import PolicySet, Verdict, load_policy_set
from gateway.policy.callspec import CallSpec

HERE = Path(__file__).resolve().parent
PACK = HERE.parent
CLEAN, POISONED = HERE / "clean.json", HERE / "poisoned.json"


@dataclass(frozen=True)
class Judged:
    """What the pack made of one corpus tool."""

    entry: dict[str, Any]
    refused: bool  # a call of it is rejected
    hidden: bool  # tools/list leaves it out
    rule: str  # the rule that decided the call ("" when none refused it)

    @property
    def flagged(self) -> bool:
        """Refused or hidden: caught when poisoned, a false positive when clean."""
        return self.refused or self.hidden


@dataclass(frozen=True)
class Score:
    """Every clean and poisoned tool, judged."""

    clean: list[Judged]
    poisoned: list[Judged]

    @property
    def false_positives(self) -> list[Judged]:
        """Clean tools the pack refuses or hides."""
        return [j for j in self.clean if j.flagged]

    @property
    def misses(self) -> list[Judged]:
        """Poisoned tools a call reaches or a listing shows."""
        return [j for j in self.poisoned if not (j.refused and j.hidden)]


def corpus(path: Path) -> list[dict[str, Any]]:
    """The tools of one corpus file."""
    entries: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return entries


def judge(policy_set: PolicySet, entry: dict[str, Any]) -> Judged:
    """Decide a call of the tool and its listing, as the gateway would."""
    tool = {"name": entry["name"], "title": entry.get("title") or "", "description": entry["description"],
            "input_schema": entry.get("inputSchema") or {}, "annotations": entry.get("annotations") or {}}
    call = CallSpec.model_validate({"tool": tool}).to_call()
    decision = policy_set.decide(call)
    refused = decision.verdict is Verdict.REJECT
    return Judged(entry, refused, not policy_set.admits_tool(call), decision.decided_by if refused else "")


def score(engine: str = "auto") -> Score:
    """The pack on both corpus files, on ``engine``."""
    policy_set = load_policy_set([PACK], engine)
    return Score([judge(policy_set, e) for e in corpus(CLEAN)], [judge(policy_set, e) for e in corpus(POISONED)])


def markdown(result: Score) -> str:
    """The figures as the README shows them."""
    servers = sorted({j.entry["server"] for j in result.clean})
    caught = len(result.poisoned) - len(result.misses)
    fps = len(result.false_positives)
    lines = [
        "| corpus | tools | refused and hidden | |",
        "|---|---|---|---|",
        f"| clean: `tools/list` of {len(servers)} MCP servers | {len(result.clean)} | {fps} | "
        f"false positives: {fps} of {len(result.clean)} ({_percent(fps, len(result.clean))}) |",
        f"| poisoned: written for this pack | {len(result.poisoned)} | {caught} | "
        f"caught {caught} of {len(result.poisoned)} ({_percent(caught, len(result.poisoned))}); "
        f"missed {len(result.misses)} |",
        "",
        "| family | poisoned | caught | missed |",
        "|---|---|---|---|",
    ]
    families = Counter(j.entry["family"] for j in result.poisoned)
    for family in sorted(families):
        missed = [j.entry["id"] for j in result.misses if j.entry["family"] == family]
        lines.append(f"| {family} | {families[family]} | {families[family] - len(missed)} | "
                     f"{', '.join(f'`{m}`' for m in missed) or '-'} |")
    rules = Counter(j.rule for j in result.poisoned if j.refused)
    lines += ["", "| rule | poisoned tools it decided |", "|---|---|"]
    lines += [f"| `{rule}` | {count} |" for rule, count in sorted(rules.items())]
    false_positives = [f"`{j.entry['server']}` `{j.entry['name']}` ({j.rule or 'hidden'})"
                       for j in result.false_positives]
    lines += ["", f"False positives: {', '.join(false_positives) or 'none'}.",
              f"Servers: {', '.join(f'`{s}`' for s in servers)}."]
    return "\n".join(lines) + "\n"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def main() -> None:
    """Print the score."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--markdown", action="store_true", help="print the README's figures")
    args = parser.parse_args()
    result = score(args.engine)
    if args.markdown:
        print(markdown(result), end="")
        return
    print(f"clean: {len(result.clean)} tools, {len(result.false_positives)} false positives")
    for j in result.false_positives:
        print(f"  FP    {j.entry['server']} {j.entry['name']}: {j.rule or 'hidden at listing'}")
    print(f"poisoned: {len(result.poisoned)} tools, {len(result.misses)} missed")
    for j in result.poisoned:
        state = "miss  " if j in result.misses else "caught"
        print(f"  {state} {j.entry['family']:<20} {j.entry['id']:<28} {j.rule}")


if __name__ == "__main__":
    main()
