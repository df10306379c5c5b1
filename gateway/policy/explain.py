"""Why a decision came out as it did: every rule in the set, considered or not, and its value.

The model is `opa eval --explain`: rules whose tools do not match are listed as such, matched
rules show their condition, outcome, message and error.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gateway.core.errors import CelEvaluationError
from gateway.policy.call import ToolCall
from gateway.policy.clauses import clause_values, split_when
from gateway.policy.compile import CompiledRule
from gateway.policy.decision import Action, Decision, Stage, Verdict
from gateway.policy.flow import Tallies
from gateway.policy.policyset import PolicySet
from gateway.policy.tallies import tally_change

__all__ = ["INVALID_INPUT", "explain", "render_text"]

# The decision of a call refused at the door, before any policy (the gateway's outcome of the same name).
INVALID_INPUT = "invalid_input"


def explain(policy_set: PolicySet, call: ToolCall) -> dict[str, Any]:
    """The decision plus a trace entry for every rule of the set; a call the gateway refuses at the door
    (``invalid_input``) is decided by no rule, as in the gateway."""
    refused = call.refused_at_door()
    if refused is not None:
        return {"decision": INVALID_INPUT, "stage": str(call.stage), "message": refused, "decided_by": None,
                "tool": call.tool.name, "revision": policy_set.revision, "engine": policy_set.engine.name,
                "trace": []}
    decision = policy_set.decide(call)
    by_rule = {r.rule: r for r in decision.rules}
    trace = []
    for rule in policy_set.rules:
        entry: dict[str, Any] = {
            "rule": rule.id,
            "at": f"{rule.file}:{rule.line}:{rule.column}",
            "stage": str(rule.stage),
            "action": str(rule.action),
            "tools": list(rule.tools) if rule.tools is not None else "*",
            "when": rule.when.source if rule.when else None,
        }
        if rule.action is Action.LABEL:  # what it gives; a fired one's result adds "labels", what it added
            entry.update({"labels_expression": rule.labels_expression.source} if rule.labels_expression
                         else {"adds": list(rule.labels)})
        result = by_rule.get(rule.id)
        if result is not None:
            entry.update(result.to_dict())
            entry.update(_clauses(policy_set, call, decision, rule))
        elif rule.stage is not call.stage:
            entry["outcome"] = "other_stage"
        else:
            entry["outcome"] = "tool_not_matched"
        trace.append(entry)
    out = decision.to_dict()
    out["tool"] = call.tool.name
    # the set's default applies only at the request stage; responses default to allow
    out["default"] = str(policy_set.default if call.stage is Stage.REQUEST else Verdict.ALLOW)
    out["engine"] = policy_set.engine.name
    out["trace"] = trace
    if call.stage is Stage.REQUEST and call.item is None and policy_set.tallies_for(call.tool.name):
        out["tallies"] = _tallies(policy_set, call, decision)
        # a call counts when it is admitted: allowed now, or approved and then released
        out["tallies_counted"] = _COUNTED.get(decision.verdict, "no")
    return out


def _tallies(policy_set: PolicySet, call: ToolCall, decision: Decision) -> list[dict[str, Any]]:
    """What the call would add to each tally that counts it, on its final arguments (counted when admitted)."""
    final = dataclasses.replace(call, args=decision.args)
    base = policy_set.cel_input(final)
    before = Tallies(base["session"]["tallies"], base["session"]["seen"])
    out = []
    for tally in policy_set.tallies_for(call.tool.name):
        entry: dict[str, Any] = {"tally": tally.id, "policy": tally.policy, "kind": tally.kind,
                                 "at": f"{tally.file}:{tally.line}:{tally.column}",
                                 "expression": tally.expression.source, "before": before.values[tally.id]}
        try:
            change = tally_change(policy_set.engine, (tally,), base)
        except CelEvaluationError as exc:
            entry["error"] = str(exc)
        else:
            entry["adds"] = change.sums[tally.id] if tally.kind == "sum" else list(change.distinct[tally.id])
            entry["after"] = before.added(change).values[tally.id]
        out.append(entry)
    return out


def _clauses(policy_set: PolicySet, call: ToolCall, decision: Decision, rule: CompiledRule) -> dict[str, Any]:
    """The value of each top-level part of the rule's `when`, when it has more than one."""
    if rule.when is None:
        return {}
    clauses = split_when(rule.when.source, policy_set.engine, policy_set.policies[rule.policy_index].variables)
    if clauses is None:
        return {}
    values = clause_values(policy_set, call, decision, rule, clauses)
    return {"clause_operator": clauses.operator,
            "clauses": [{"source": c.source, "value": v} for c, v in zip(clauses.parts, values, strict=True)]}


def render_text(report: dict[str, Any]) -> str:
    """A person-readable rendering of ``explain``'s output."""
    if report["decision"] == INVALID_INPUT:
        return "\n".join([f"decision: {INVALID_INPUT}  (tool {report['tool']}, stage {report['stage']})",
                          "decided by: the gateway's check of every call's values, before any policy",
                          f"message: {report['message']}", f"revision {report['revision']}, engine {report['engine']}"])
    lines = [
        f"decision: {report['decision']}  (tool {report['tool']}, stage {report['stage']})",
        f"decided by: {report['decided_by'] or 'no rule fired; the default is ' + report['default']}",
    ]
    if report["message"]:
        lines.append(f"message: {report['message']}")
    if report["args"] != report["original_args"]:
        lines.append(f"args: {report['original_args']} -> {report['args']}")
    for req in report["approvals"]:
        lines.append(f"approval needed ({req['rule']}): approvers {', '.join(req['approvers']) or 'any'}")
    if report.get("labels"):
        lines.append(f"labels added to the run: {', '.join(report['labels'])}")
    lines.extend(_tally_lines(report.get("tallies", ()), report.get("tallies_counted", "")))
    lines.append(f"revision {report['revision']}, engine {report['engine']}, {report['elapsed_us']} µs")
    lines.append("")
    lines.append("rules:")
    for entry in report["trace"]:
        mark = _MARKS.get(entry["outcome"], "?")
        head = f"  {mark} {entry['rule']} [{entry['action']}] {entry['outcome']}"
        if entry.get("effect"):
            head += f" -> {entry['effect']}"
        if entry.get("labels"):
            head += f" -> labels {', '.join(entry['labels'])}"
        lines.append(head)
        lines.append(f"      at {entry['at']}  tools {entry['tools']}")
        if entry["when"]:
            lines.append(f"      when {entry['when']}")
        if "adds" in entry:
            lines.append(f"      labels {', '.join(entry['adds'])}")
        if entry.get("labels_expression"):
            lines.append(f"      labelsExpression {entry['labels_expression']}")
        for i, clause in enumerate(entry.get("clauses", ())):
            joint = entry["clause_operator"] if i else "  "
            lines.append(f"        {joint} {clause['source']}  => {_value(clause['value'])}")
        if entry.get("message"):
            lines.append(f"      message {entry['message']!r}")
        if entry.get("error"):
            lines.append(f"      error {entry['error']}")
    return "\n".join(lines)


_COUNTED = {Verdict.ALLOW: "yes", Verdict.APPROVE: "when approved"}


def _tally_lines(tallies: Any, counted: str) -> list[str]:
    if not tallies:
        return []
    lines = [f"tallies (a call counts when it is admitted; this one: {counted}):"]
    for t in tallies:
        head = f"  {t['tally']} ({t['kind']}, {t['at']}) {t['expression']}"
        if "error" in t:
            lines.append(f"{head}  => error: {t['error']} (the call is refused)")
        else:
            lines.append(f"{head}  => adds {json.dumps(t['adds'])}: {t['before']} -> {t['after']}")
    return lines


def _value(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"error"}:
        return f"error: {value['error']}"
    if value is None:
        return "(not shown: does not compile on its own)"
    return json.dumps(value, default=str)


_MARKS = {"fired": "+", "not_fired": "-", "error": "!", "audit": "~", "tool_not_matched": " ",
          "other_stage": " "}
