"""The fields of a rule that only make sense with some actions, stages or targets (checked at compile)."""

from __future__ import annotations

from typing import Protocol

from gateway.core.globs import glob_problem
from gateway.core.sourcemap import Path
from gateway.policy.decision import REQUESTER, Action, Stage
from gateway.policy.labels import label_problem, labels_problem
from gateway.policy.model import RuleSpec

__all__ = ["Reporter", "check_shape"]

_RESPONSE_ACTIONS = frozenset({Action.REWRITE, Action.REJECT, Action.TERMINATE, Action.LABEL})
# What a label rule may not have: it adds labels and nothing else (no verdict, so nothing to say or hold).
_NOT_FOR_LABELS = ("message", "messageExpression", "approval", "rewrite", "result", "resultExpression")
# What a rule deciding resource reads or prompt gets may do (there is no approval or rewrite of a read).
_ITEM_ACTIONS = frozenset({Action.ALLOW, Action.REJECT, Action.TERMINATE})


class Reporter(Protocol):
    """Where a problem is reported (the compiler)."""

    def error(self, path: Path, code: str, message: str, rule: str | None, hint: str | None = None,
              *, key: bool = False) -> None:
        """Report an error at ``path`` of the document."""
        ...


def check_shape(c: Reporter, rule: RuleSpec, path: Path, rule_id: str) -> None:
    """Fields that only make sense with some actions or stages."""
    action = rule.action
    if rule.stage is Stage.RESPONSE and action not in _RESPONSE_ACTIONS:
        c.error((*path, "action"), "invalid-stage-action",
                f"action {action!s} is not valid at the response stage", rule_id,
                "at the response stage use rewrite, reject, terminate or label")
    if action is Action.REWRITE and rule.rewrite is None:
        c.error((*path, "action"), "missing-key", "action rewrite needs a 'rewrite' block", rule_id,
                "add rewrite: {set: {...}, remove: [...], redact: [...]}")
    misplaced = {
        "rewrite": (rule.rewrite is not None, Action.REWRITE),
        "approval": (rule.approval is not None, Action.APPROVE),
        "result": (rule.result is not None, Action.SKIP),
        "resultExpression": (rule.resultExpression is not None, Action.SKIP),
    }
    for key, (present, wanted) in misplaced.items():
        if present and action is not wanted and action is not Action.LABEL:
            c.error((*path, key), "misplaced-key", f"{key!r} only applies to action {wanted!s}", rule_id,
                    f"remove {key!r} or change the action to {wanted!s}", key=True)
    if rule.result is not None and rule.resultExpression is not None:
        c.error((*path, "resultExpression"), "conflicting-keys", "give either 'result' or 'resultExpression'",
                rule_id, "remove one of them", key=True)
    if rule.tools is not None and not rule.tools:
        c.error((*path, "tools"), "invalid-value", "'tools' is empty, so the rule can never match", rule_id,
                "omit 'tools' to match every tool, or list names or globs")
    for key, patterns in (("tools", rule.tools), ("resources", rule.resources), ("prompts", rule.prompts)):
        for index, pattern in enumerate(patterns or ()):
            problem = glob_problem(pattern)
            if problem is not None:
                c.error((*path, key, index), "invalid-value", problem, rule_id,
                        "fix the [...] set: a range runs from the lower character to the higher")
    _check_items(c, rule, path, rule_id)
    _check_approvers(c, rule, path, rule_id)
    _check_labels(c, rule, path, rule_id)


def _check_labels(c: Reporter, rule: RuleSpec, path: Path, rule_id: str) -> None:
    """A label rule gives exactly one of ``labels`` / ``labelsExpression``, valid labels, and nothing else."""
    if rule.action is not Action.LABEL:
        for key in ("labels", "labelsExpression"):
            if getattr(rule, key) is not None:
                c.error((*path, key), "misplaced-key", f"{key!r} only applies to action label", rule_id,
                        f"remove {key!r} or change the action to label", key=True)
        return
    for key in _NOT_FOR_LABELS:
        if getattr(rule, key) is not None:
            c.error((*path, key), "misplaced-key", f"a label rule takes no {key!r}: it only adds labels", rule_id,
                    f"remove {key!r}, or give it its own rule with another action", key=True)
    if rule.labels is None and rule.labelsExpression is None:
        c.error((*path, "action"), "missing-key", "action label needs 'labels' or 'labelsExpression'", rule_id,
                "add labels: [NAME, ...], or labelsExpression: a CEL list of strings")
    elif rule.labels is not None and rule.labelsExpression is not None:
        c.error((*path, "labelsExpression"), "conflicting-keys", "give either 'labels' or 'labelsExpression'",
                rule_id, "remove one of them", key=True)
    if rule.labels is None:
        return
    if not rule.labels:
        c.error((*path, "labels"), "invalid-value", "'labels' is empty, so the rule adds nothing", rule_id,
                "name at least one label")
    for index, label in enumerate(rule.labels):
        problem = label_problem(label)
        if problem is not None:
            c.error((*path, "labels", index), "invalid-label", problem, rule_id,
                    "labels start with a letter or digit, then letters, digits, _ . : or -")
    problem = labels_problem(rule.labels)
    if problem is not None:
        c.error((*path, "labels"), "invalid-label", problem, rule_id, "split them over several rules")


def _check_approvers(c: Reporter, rule: RuleSpec, path: Path, rule_id: str) -> None:
    """``via: elicitation`` lets the requester's own client answer, so it must name the requester (``self``)
    among the approvers; ``self`` means nothing on the page, where nobody approves their own call."""
    spec = rule.approval
    if spec is None:
        return
    asks_self = REQUESTER in spec.approvers
    if spec.via == "elicitation" and not asks_self:
        c.error((*path, "approval", "via"), "invalid-value",
                "via: elicitation lets the requester's own client approve the call, but no approver is the"
                " requester", rule_id,
                "add self to approvers (approvers: [self], or [self, group:NAME] to let either decide),"
                " or use via: page")
    if asks_self and spec.via != "elicitation":
        c.error((*path, "approval", "approvers", spec.approvers.index(REQUESTER)), "invalid-value",
                "self (the requester) can only approve through their own client, and nobody may approve their"
                " own call on the page", rule_id, "add via: elicitation, or remove self")


def _check_items(c: Reporter, rule: RuleSpec, path: Path, rule_id: str) -> None:
    """Resource reads and prompt gets are allowed or refused before they run, nothing else."""
    for key, patterns in (("resources", rule.resources), ("prompts", rule.prompts)):
        if patterns is None:
            continue
        if not patterns:
            c.error((*path, key), "invalid-value", f"{key!r} is empty, so the rule can never match", rule_id,
                    f"omit {key!r}, or list URIs, names or globs")
        if rule.action not in _ITEM_ACTIONS or rule.stage is not Stage.REQUEST:
            c.error((*path, "action"), "invalid-item-action",
                    f"a rule with {key!r} can only allow, reject or terminate at the request stage", rule_id,
                    "give rewrites, approvals and skips their own rule with 'tools'")
            return
