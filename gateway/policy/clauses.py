"""A `when` split at its top-level ``&&`` / ``||``, and each part's value for one call.

The split comes from the front end's syntax tree (``cel/syntax.py``, the one loading parsed), never
from text search, so operators inside strings, comments, calls and parentheses stay where they are. Each
clause is compiled on its own with the set's engine and evaluated in the activation the rule saw
(file variables bound), so `gateway explain` can say which part of a condition was false and
`gateway test --coverage` which parts no case made true or false.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import CelCompileError, CelEvaluationError
from gateway.policy.call import ToolCall
from gateway.policy.cel import Engine, ExprType, Program
from gateway.policy.cel.syntax import flatten, parse
from gateway.policy.compile import CompiledRule, Variable
from gateway.policy.decision import Action, Decision, Stage
from gateway.policy.evaluate import rule_activation
from gateway.policy.policyset import PolicySet

__all__ = ["Clause", "Clauses", "clause_values", "split_when"]

@dataclass(frozen=True, slots=True)
class Clause:
    """One top-level part of a condition."""

    source: str
    program: Program | None  # None: it does not compile on its own (then its value is not shown)
    inlined: bool = False  # compiled with the file variables written in, so it needs none bound


@dataclass(frozen=True, slots=True)
class Clauses:
    """A condition's top-level operator and parts (one part, and no operator, when it has neither)."""

    operator: str | None
    parts: tuple[Clause, ...]


def split_when(source: str, engine: Engine, variables: Sequence[Variable] = ()) -> Clauses | None:
    """``source`` split at its top-level ``&&`` or ``||``; None when it has no such operator.

    Each part is the source span of one operand in the tree, compiled as written; the file
    ``variables`` are then written into its tree where they can be, as the rule's are, so it is
    evaluated the same way (a bound variable's value does not always survive
    being bound again: the C++ engine will not take back a timestamp).
    """
    try:
        split = flatten(parse(source))  # the tree loading parsed (cached by source)
    except CelCompileError:
        return None
    if split is None:
        return None
    operator, nodes = split
    running = {v.name: v.running for v in variables if v.running is not None}
    parts: list[Clause] = []
    for node in nodes:
        text = source[node.meta.start_pos:node.meta.end_pos].strip()
        try:
            program: Program | None = engine.compile(text, ExprType.ANY)
        except CelCompileError:
            parts.append(Clause(text, None))
            continue
        inlined = engine.inline(program, running) if running and program is not None else None
        parts.append(Clause(text, inlined or program, inlined is not None))
    return Clauses(operator, tuple(parts))


def clause_values(policy_set: PolicySet, call: ToolCall, decision: Decision, rule: CompiledRule,
                  clauses: Clauses) -> list[Any]:
    """Each clause's value for ``call`` (an error as ``{"error": text}``; None when it cannot be shown).

    A validating rule sees the final arguments (or result); a rewrite is shown against the call's
    arguments as given, which differs from what it saw only when an earlier rewrite changed them.
    """
    base = policy_set.cel_input(call)
    if rule.action is not Action.REWRITE:
        if call.stage is Stage.REQUEST:
            base["args"] = decision.args
        else:
            base["result"] = decision.result
    activations: dict[bool, Any] = {}
    values: list[Any] = []
    for part in clauses.parts:
        if part.program is None:
            values.append(None)
            continue
        try:
            if part.inlined not in activations:
                activations[part.inlined] = policy_set.engine.activation(base) if part.inlined else \
                    rule_activation(policy_set.engine, policy_set.policies, base, rule)
            values.append(part.program.evaluate(activations[part.inlined]))
        except CelEvaluationError as exc:
            values.append({"error": str(exc)})
    return values
