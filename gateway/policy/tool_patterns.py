"""Did-you-mean for a ``tools:`` pattern that matches no tool: the names or globs close to it that do match."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from gateway.core.globs import glob_match, glob_problem

__all__ = ["closest", "suggest_patterns", "unclosed_bracket"]

_WILDCARDS = "*?["
_MAX_SUGGESTIONS = 3
_CLOSE = 0.6  # difflib's similarity below which a name is no suggestion
_NEAR_BEST = 0.1  # a second suggestion must be about as close as the first


def unclosed_bracket(pattern: str) -> bool:
    """Whether a ``[`` in ``pattern`` has no closing ``]`` (and so matches a literal ``[``)."""
    start = pattern.find("[")
    while start >= 0:
        first = start + 1 + (start + 1 < len(pattern) and pattern[start + 1] in "!^")
        end = pattern.find("]", first + 1)
        if end < 0:
            return True
        start = pattern.find("[", end + 1)
    return False


def suggest_patterns(pattern: str, names: list[str]) -> list[str]:
    """Patterns (or names) close to ``pattern`` that do match a tool."""
    def matches(candidate: str) -> bool:
        return glob_problem(candidate) is None and any(glob_match(n, candidate) for n in names)

    if not any(c in pattern for c in _WILDCARDS):
        return closest(pattern, names)
    found: list[str] = []
    if unclosed_bracket(pattern):
        repaired = pattern.replace("[", "")
        if matches(repaired):
            found.append(repaired)
    cut = min(i for i in (pattern.find(c) for c in _WILDCARDS) if i >= 0)
    prefix, rest = pattern[:cut], pattern[cut:]
    # the literal head is where typos are: compare it with the tool names' heads of about its length
    # (same length first: a swap or a wrong letter; then one letter dropped or added)
    for k in (cut, cut - 1, cut + 1):
        heads = sorted({n[:k] for n in names if 0 < k <= len(n)})
        for head in difflib.get_close_matches(prefix, heads, n=10, cutoff=0.8):
            candidate = head + rest
            if candidate not in found and candidate != pattern and matches(candidate):
                found.append(candidate)
        if found:
            break
    return found[:_MAX_SUGGESTIONS]


def closest(word: str, candidates: Sequence[str]) -> list[str]:
    """The candidates closest to ``word``: those about as close as the best one, best first."""
    scored = sorted(((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in candidates), reverse=True)
    if not scored or scored[0][0] < _CLOSE:
        return []
    return [c for ratio, c in scored[:_MAX_SUGGESTIONS] if ratio >= max(_CLOSE, scored[0][0] - _NEAR_BEST)]
