"""A call's conditions in one evaluation: its rules' ``when`` (or ``when`` joined with its message) and its
tallies' expressions listed as one CEL program.

The engine's cost of an evaluation is mostly the call itself, not the expression: a call whose rules and
tallies are evaluated one by one pays it once each, and a run-aware set (a rule reading the run, a tally
counting the tool) pays it two or three times. Listed, it is paid once. Nothing changes in what a call is
told: a value the list gives is used only when it is as clear as the rule's own evaluation would be (a
boolean ``when``, a ``[]`` or ``[message]`` join), and an error anywhere in the list (a missing argument in
one rule, a tally of a call that is refused anyway) makes the decision evaluate everything one by one, as
it did before, so each failure is reported by the rule or tally it belongs to.

Only the validate phase is listed (rewrites change the arguments the rest read, so they run first, one by
one) and only rules reading no file variable bound as a value (those need an activation of their own).
Built once per tool name and stage, at the first call (the rules a tool gets are known only then), and
cached as the rule index is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.policy.cel import Engine, Program
from gateway.policy.compiled import CompiledRule, CompiledTally
from gateway.policy.decision import Action

__all__ = ["UNSET", "Fused", "fuse"]

UNSET: Any = object()  # a rule the list gives no value for: it is evaluated on its own


@dataclass(frozen=True, slots=True)
class Fused:
    """One listed program: ``slots[i]`` is where rule ``i`` of the stage finds its value (-1: not listed); the
    tallies' values end the list, in the order given."""

    program: Program
    slots: tuple[int, ...]
    tallies: int
    size: int  # how many values the list gives

    def values(self, activation: Any) -> list[Any] | None:
        """Every listed value, or None when any of them failed (then everything is evaluated one by one)."""
        try:
            values = self.program.evaluate(activation)
        except Exception:  # whatever failed is reported by its own evaluation next
            return None
        return values if type(values) is list and len(values) == self.size else None

    def given(self, values: list[Any]) -> list[Any]:
        """Each rule's value from ``values`` (what ``values`` gave), in rule order; UNSET for a rule not listed."""
        return [UNSET if slot < 0 else values[slot] for slot in self.slots]


def _condition(rule: CompiledRule) -> Program | None:
    """What rule ``rule`` is listed as: its joined ``when``/message, else its ``when`` (None: not listed)."""
    if rule.action is Action.REWRITE or rule.variables_needed:
        return None
    if rule.when_message is not None:
        return rule.when_message
    return rule.when.program if rule.when is not None else None


def fuse(engine: Engine, rules: Sequence[CompiledRule], tallies: Sequence[CompiledTally] = ()) -> Fused | None:
    """The listed program for one stage's ``rules`` and the call's ``tallies``, or None when listing them would
    not save an evaluation (fewer than two) or the engine does not list."""
    programs: list[Program] = []
    slots: list[int] = []
    for rule in rules:
        condition = _condition(rule)
        slots.append(-1 if condition is None else len(programs))
        if condition is not None:
            programs.append(condition)
    programs.extend(t.expression.program for t in tallies)
    if len(programs) < 2:
        return None
    try:
        program = engine.fuse(programs)
    except Exception:  # an engine that cannot plan the list: each is evaluated on its own
        return None
    return None if program is None else Fused(program, tuple(slots), len(tallies), len(programs))
