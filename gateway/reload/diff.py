"""What a reload changes: rules added, removed and changed (by rule id), and files added and removed.

A rule is "changed" when its id stays and what it does differs: its action, stage, tools, any CEL
source it runs (with the file variables it reads), its message, approval, rewrite or result. Where
it sits in the file does not count.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from gateway.policy.compile import CompiledPolicy, CompiledRule, Expression
from gateway.policy.policyset import PolicySet

__all__ = ["diff_sets", "rule_digest"]


def _source(expression: Expression | None) -> str | None:
    return None if expression is None else expression.source


def rule_digest(rule: CompiledRule, policy: CompiledPolicy) -> str:
    """SHA-256 of what the rule does, independent of where it is written."""
    variables = {v.name: v.expression.source for v in policy.variables if v.name in rule.variables_read}
    rewrite = None if rule.rewrite is None else {
        "set": [[list(path), expr.source] for path, expr in rule.rewrite.set],
        "remove": [list(path) for path in rule.rewrite.remove],
        "redact": [p.pattern for p in rule.rewrite.redact],
    }
    content = {
        "action": str(rule.action), "stage": str(rule.stage), "mode": str(rule.mode),
        "on_error": str(rule.on_error), "tools": None if rule.tools is None else list(rule.tools),
        "when": _source(rule.when), "message": rule.message, "message_expression": _source(rule.message_expression),
        "description": rule.description, "approval": None if rule.approval is None else rule.approval.to_dict(),
        "rewrite": rewrite, "result": rule.result, "result_expression": _source(rule.result_expression),
        "variables": variables,
    }
    for key, targets in (("resources", rule.resources), ("prompts", rule.prompts)):
        if targets is not None:  # only when set: the digests of rules that name neither stay as they were
            content[key] = list(targets)
    if rule.labels or rule.labels_expression is not None:  # a label rule: what it adds is what it does
        content["labels"], content["labels_expression"] = list(rule.labels), _source(rule.labels_expression)
    text = json.dumps(content, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _rules(policy_set: PolicySet) -> dict[str, str]:
    return {r.id: rule_digest(r, p) for p in policy_set.policies for r in p.rules}


def _tallies(policy_set: PolicySet) -> dict[str, str]:
    """Each tally's id and what it counts (kind, tools, expression), as one comparable text."""
    return {t.id: json.dumps([t.kind, list(t.tools), t.expression.source]) for t in policy_set.tallies}


def diff_sets(old: PolicySet, new: PolicySet, shown: Callable[[str], str] = str) -> dict[str, Any]:
    """The difference from ``old`` to ``new``, JSON-ready; ``shown`` turns file paths into what is logged."""
    before, after = _rules(old), _rules(new)
    old_files, new_files = {shown(f) for f in old.files}, {shown(f) for f in new.files}
    out: dict[str, Any] = {
        "old_revision": old.revision,
        "revision": new.revision,
        "rules": len(new.rules),
        "rules_added": sorted(after.keys() - before.keys()),
        "rules_removed": sorted(before.keys() - after.keys()),
        "rules_changed": sorted(k for k in before.keys() & after.keys() if before[k] != after[k]),
        "files_added": sorted(new_files - old_files),
        "files_removed": sorted(old_files - new_files),
    }
    if old.default != new.default:
        out["default"] = {"old": str(old.default), "new": str(new.default)}
    was, now = _tallies(old), _tallies(new)
    if was != now:  # only when they differ: a reload of sets without tallies reads as before
        out["tallies_added"] = sorted(now.keys() - was.keys())
        out["tallies_removed"] = sorted(was.keys() - now.keys())
        out["tallies_changed"] = sorted(k for k in was.keys() & now.keys() if was[k] != now[k])
    return out
