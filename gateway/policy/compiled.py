"""What compiling a policy file gives: expressions, variables and rules that the evaluator only reads."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.cel import ExprType, Program
from gateway.policy.cel.types import DYN
from gateway.policy.decision import Action, ApprovalRequirement, Mode, OnError, Stage
from gateway.policy.rewrite import PathParts

__all__ = ["CompiledPolicy", "CompiledRewrite", "CompiledRule", "CompiledTally", "Expression", "Variable"]


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled expression with its source, kept for explain output and error messages."""

    source: str
    program: Program
    expected: ExprType
    references: frozenset[str]
    variables_read: frozenset[str] | None = frozenset()  # variables.NAME it reads; None: it reads them all
    type: Any = DYN  # its static type in the typed environment


@dataclass(frozen=True, slots=True)
class Variable:
    """A compiled file variable and the earlier variables it needs (transitively)."""

    name: str
    expression: Expression
    needs: frozenset[str]
    # its program with the earlier variables it reads written in (``Engine.inline``); None: it cannot
    # be written into a rule, so a rule reading it binds its value
    running: Program | None = None


@dataclass(frozen=True, slots=True)
class CompiledRewrite:
    """A rewrite's compiled parts."""

    set: tuple[tuple[PathParts, Expression], ...] = ()
    remove: tuple[PathParts, ...] = ()
    redact: tuple[re.Pattern[str], ...] = ()


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """A rule ready to evaluate."""

    id: str  # policy/rule
    policy_index: int
    ordinal: int  # position in the whole set's load order
    action: Action
    stage: Stage
    tools: tuple[str, ...] | None
    when: Expression | None
    message: str | None
    message_expression: Expression | None
    on_error: OnError
    mode: Mode
    file: str
    line: int
    column: int
    description: str = ""
    approval: ApprovalRequirement | None = None
    rewrite: CompiledRewrite | None = None
    result: Any = None
    result_expression: Expression | None = None
    references: frozenset[str] = frozenset()  # CEL variables the rule reads, variables resolved
    variables_needed: frozenset[str] = frozenset()  # file variables to bind when it runs (not inlined)
    variables_read: frozenset[str] = frozenset()  # every file variable it reads as written, transitively
    resources: tuple[str, ...] | None = None  # gateway resource URIs it decides reads of (globs)
    prompts: tuple[str, ...] | None = None  # exposed prompt names it decides gets of (globs)
    # ``when`` and ``messageExpression`` as one program, ``when ? [message] : []`` (``Engine.join``): a
    # firing rule costs one evaluation instead of two. Only a shortcut: any other value than ``[]`` or ``[a string]``
    # (an error, a wrong type) sends the evaluator back to the two expressions, so answers stay the same.
    when_message: Program | None = None
    labels: tuple[str, ...] = ()  # action label: the labels it adds (static)
    labels_expression: Expression | None = None  # ... or computed, a list(string)

    @property
    def decides_tools(self) -> bool:
        """Whether it applies to tool calls: it names tools, or names no target at all."""
        return self.tools is not None or (self.resources is None and self.prompts is None)

    @property
    def expressions(self) -> tuple[Expression, ...]:
        """Every expression it runs, ``when`` first."""
        found = [e for e in (self.when, self.message_expression, self.result_expression, self.labels_expression)
                 if e is not None]
        if self.rewrite is not None:
            found.extend(e for _, e in self.rewrite.set)
        return tuple(found)


@dataclass(frozen=True, slots=True)
class CompiledTally:
    """A tally ready to evaluate: ``expression`` gives what an admitted call of ``tools`` adds."""

    id: str  # unique across the set: session.tallies.ID
    policy: str
    kind: str  # "sum" or "distinct"
    tools: tuple[str, ...]
    expression: Expression
    file: str
    line: int
    column: int
    description: str = ""


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    """One policy file, compiled."""

    name: str
    file: str
    description: str
    default: str | None
    variables: tuple[Variable, ...]
    rules: tuple[CompiledRule, ...] = field(default=())
    tallies: tuple[CompiledTally, ...] = field(default=())
