"""Which rules apply to a tool: an index resolved once per tool name.

Exact names go in a dict; globbed rules are tested once per new tool name and the answer is
cached, so a decision's cost does not grow with rules that do not match the tool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.core.globs import glob_match, is_glob
from gateway.core.limits import MAX_INDEXED_TOOL_NAMES
from gateway.policy.cel import VARIABLES
from gateway.policy.compile import CompiledRule
from gateway.policy.decision import Stage
from gateway.policy.fused import Fused

__all__ = ["MatchedRules", "RuleIndex"]

@dataclass(frozen=True, slots=True)
class MatchedRules:
    """The rules for one tool name, in load order, split by stage, with the CEL inputs each stage reads."""

    request: tuple[CompiledRule, ...]
    response: tuple[CompiledRule, ...]
    # CEL variables the stage's rules read (their file variables resolved): a decision builds and
    # binds only these, since binding an unread map costs as much as reading a small one.
    request_reads: frozenset[str] = frozenset(VARIABLES)
    response_reads: frozenset[str] = frozenset(VARIABLES)
    # each stage's conditions listed as one program (gateway/policy/fused.py), when the index lists them
    request_fused: Fused | None = None
    response_fused: Fused | None = None


class RuleIndex:
    """Tool name → matching rules, with a bounded cache."""

    def __init__(self, rules: Sequence[CompiledRule],
                 targets: Callable[[CompiledRule], tuple[str, ...] | None] | None = None,
                 fuse: Callable[[Sequence[CompiledRule]], Fused | None] | None = None) -> None:
        """``targets`` gives a rule's patterns (None: it matches everything); by default the tool index. ``fuse``
        lists a stage's conditions as one program, made with the rest when a name is first looked up."""
        self._fuse = fuse
        if targets is None:
            rules = [r for r in rules if r.decides_tools]
            targets = _tools
        self._targets = targets
        self._everywhere: list[CompiledRule] = []
        self._exact: dict[str, list[CompiledRule]] = {}
        self._globbed: list[CompiledRule] = []
        for rule in rules:
            patterns = targets(rule)
            if patterns is None:
                self._everywhere.append(rule)
                continue
            if any(is_glob(p) for p in patterns):
                self._globbed.append(rule)
            for name in patterns:
                if not is_glob(name):
                    self._exact.setdefault(name, []).append(rule)
        self._cache: dict[str, MatchedRules] = {}

    def lookup(self, tool: str) -> MatchedRules:
        """The rules that apply to ``tool``."""
        found = self._cache.get(tool)
        if found is None:
            if len(self._cache) >= MAX_INDEXED_TOOL_NAMES:
                self._cache.clear()
            found = self._cache[tool] = self._resolve(tool)
        return found

    def _resolve(self, tool: str) -> MatchedRules:
        chosen = {id(r): r for r in self._everywhere}
        chosen.update((id(r), r) for r in self._exact.get(tool, ()))
        for rule in self._globbed:
            patterns = self._targets(rule)
            if patterns is not None and any(glob_match(tool, p) for p in patterns if is_glob(p)):
                chosen[id(rule)] = rule
        ordered = sorted(chosen.values(), key=lambda r: r.ordinal)
        request = tuple(r for r in ordered if r.stage is Stage.REQUEST)
        response = tuple(r for r in ordered if r.stage is Stage.RESPONSE)
        fuse = self._fuse
        return MatchedRules(request, response, _reads(request), _reads(response),
                            fuse(request) if fuse else None, fuse(response) if fuse else None)


def _tools(rule: CompiledRule) -> tuple[str, ...] | None:
    return rule.tools


def _reads(rules: Sequence[CompiledRule]) -> frozenset[str]:
    return frozenset().union(*(_binds(r) for r in rules))


def _binds(rule: CompiledRule) -> frozenset[str]:
    """The CEL variables ``rule`` reads as it runs: ``variables`` only when one of its expressions
    still reads it (file variables are mostly written into the expressions at load)."""
    if all(e.variables_read == frozenset() for e in rule.expressions):
        return rule.references - {"variables"}
    return rule.references
