"""Evaluate the rules that match one call, in Kubernetes' admission order.

Request stage: every matching ``rewrite`` rule first, in load order, each seeing the arguments as
rewritten so far (mutate); then every other matching rule on the final arguments (validate).
Response stage: rewrites of the result, then reject/terminate rules on the final result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from gateway.core.errors import CelEvaluationError
from gateway.policy.cel import Engine, ExprType, check_result_type
from gateway.policy.compile import CompiledPolicy, CompiledRewrite, CompiledRule, Expression
from gateway.policy.compiled import CompiledTally
from gateway.policy.decide import DEFAULT_MESSAGES, choose_verdict
from gateway.policy.decision import (
    ACTION_VERDICT,
    Action,
    ApprovalRequirement,
    Decision,
    Mode,
    Outcome,
    RuleResult,
    Stage,
    Verdict,
    failure_verdict,
)
from gateway.policy.flow import TallyChange
from gateway.policy.fused import UNSET, Fused
from gateway.policy.labels import checked_labels
from gateway.policy.rewrite import redact, remove_path, set_path
from gateway.policy.tallies import TallyError, tally_change_of, tally_change_on

__all__ = ["condition_of", "evaluate_call", "evaluate_counted", "rule_activation"]

# The Python type an expression's value must have, by what it must evaluate to (see check_result_type).
_WANTED: dict[ExprType, type] = {ExprType.BOOL: bool, ExprType.STRING: str}


# Enum members the decision loop reads per rule, as module globals: on Python 3.11 ``Action.REWRITE``
# is a lookup through the enum's metaclass, several times slower than a global, and it adds up.
_REQUEST = Stage.REQUEST
_REWRITE = Action.REWRITE
_SKIP_ACTION = Action.SKIP
_LABEL_ACTION = Action.LABEL
_APPROVE = Verdict.APPROVE
_SKIP = Verdict.SKIP
_NOT_FIRED = Outcome.NOT_FIRED
_FIRED = Outcome.FIRED
_AUDITED = Outcome.AUDIT
_AUDIT_MODE = Mode.AUDIT


class _Bindings:
    """Variable values for the rules of one call.

    Building a CEL activation is the costly part of an evaluation, so there are as few as can be:
    one shared activation for every rule that reads no file variable, and one per (file, set of
    variables) for the rest. A variable is evaluated only when a matched rule needs it, once per
    version of the arguments; a rewrite that changes them starts afresh.
    """

    __slots__ = ("_activations", "_shared", "_values", "base", "engine", "policies", "variable_errors")

    def __init__(self, engine: Engine, policies: Sequence[CompiledPolicy], base: dict[str, Any]) -> None:
        self.engine = engine
        self.policies = policies
        self.base = base
        self._shared: Any = None
        self._activations: dict[tuple[int, frozenset[str]], Any] = {}
        self._values: dict[int, dict[str, Any]] = {}
        self.variable_errors: dict[int, dict[str, str]] = {}

    def replace(self, name: str, value: Any) -> None:
        self.base[name] = value
        self._shared = None
        self._activations.clear()
        self._values.clear()
        self.variable_errors.clear()

    def shared(self) -> Any:
        """The activation for expressions that read no file variable."""
        if self._shared is None:
            self._shared = self.engine.activation(self.base)
        return self._shared

    def activation(self, rule: CompiledRule) -> Any:
        needed = rule.variables_needed
        if not needed:
            return self.shared()
        key = (rule.policy_index, needed)
        found = self._activations.get(key)
        if found is None:
            values = self.values_for(rule.policy_index, needed)
            found = self._activations[key] = self.engine.activation({**self.base, "variables": values})
        return found

    def values_for(self, policy_index: int, needed: frozenset[str]) -> dict[str, Any]:
        """The values of the file variables ``needed`` (those that evaluated), each evaluated once per call."""
        done = self._values.setdefault(policy_index, {})
        failed = self.variable_errors.setdefault(policy_index, {})
        for var in self.policies[policy_index].variables:  # in order: a variable's needs come first
            if var.name not in needed or var.name in done or var.name in failed:
                continue
            activation = self.shared() if not var.needs else self.engine.activation(
                {**self.base, "variables": {n: done[n] for n in var.needs if n in done}})
            try:
                done[var.name] = var.expression.program.evaluate(activation)
            except CelEvaluationError as exc:
                failed[var.name] = str(exc)
        return {n: done[n] for n in needed if n in done}

    def evaluate(self, rule: CompiledRule, expr: Expression) -> Any:
        if rule.variables_needed:
            activation = self.activation(rule)
        else:  # the common case, without the calls
            activation = self._shared
            if activation is None:
                activation = self._shared = self.engine.activation(self.base)
        value = expr.program.evaluate(activation)
        wanted = _WANTED.get(expr.expected)
        if wanted is None or isinstance(value, wanted):
            return value
        raise CelEvaluationError(check_result_type(value, expr.expected) or "unexpected result type")

    def explain_error(self, rule: CompiledRule, error: str) -> str:
        if rule.variables_read:  # inlined variables fail inside the rule: find which (error path only)
            self.values_for(rule.policy_index, rule.variables_read)
        failed = {k: v for k, v in self.variable_errors.get(rule.policy_index, {}).items()
                  if k in rule.variables_read}
        if failed:
            names = ", ".join(f"{k} ({v})" for k, v in failed.items())
            return f"{error}; variables that failed: {names}"
        return error


def evaluate_call(
    engine: Engine,
    policies: Sequence[CompiledPolicy],
    rules: Sequence[CompiledRule],
    stage: Stage,
    base: dict[str, Any],
    default: Verdict,
    tool_name: str,
    revision: str,
    fused: Fused | None = None,
) -> Decision:
    """Decide one call at one stage; ``base`` holds the CEL maps (args and result included); ``fused``: the
    stage's conditions listed as one program (gateway/policy/fused.py)."""
    started = time.perf_counter()
    return _decided(_Bindings(engine, policies, base), rules, stage, default, tool_name, revision, started,
                    fused)[0]


def evaluate_counted(
    engine: Engine,
    policies: Sequence[CompiledPolicy],
    rules: Sequence[CompiledRule],
    base: dict[str, Any],
    default: Verdict,
    tool_name: str,
    revision: str,
    tallies: Sequence[CompiledTally],
    counts: frozenset[Verdict],
    fused: Fused | None = None,
) -> tuple[Decision, TallyChange | TallyError | None]:
    """A request-stage decision and, when its verdict is one of ``counts``, what admitting it adds to ``tallies``.

    The tallies read the decision's own activation (its final, rewritten arguments): no second one is built.
    ``base`` must hold every map the rules and the tallies read. A tally that cannot be computed is returned,
    not raised: the caller refuses the call (fail closed). ``fused`` lists the rules' conditions and then the
    tallies' expressions.
    """
    started = time.perf_counter()
    bindings = _Bindings(engine, policies, base)
    decision, listed = _decided(bindings, rules, _REQUEST, default, tool_name, revision, started, fused)
    if decision.verdict not in counts or not tallies:
        return decision, None
    try:
        if listed is None:
            return decision, tally_change_on(bindings.shared(), tallies)
        return decision, tally_change_of(tallies, listed[len(listed) - len(tallies):])
    except TallyError as exc:
        return decision, exc


def _decided(bindings: _Bindings, rules: Sequence[CompiledRule], stage: Stage, default: Verdict, tool_name: str,
             revision: str, started: float, fused: Fused | None) -> tuple[Decision, list[Any] | None]:
    """The decision, and the values ``fused`` listed (None: not listed, or one of them failed)."""
    original_args = bindings.base["original_args"]
    target = "args" if stage is _REQUEST else "result"
    results: list[RuleResult] = []
    approvals: list[ApprovalRequirement] = []
    skip_result: Any = None
    skip_seen = False  # the first skip rule that fires gives the result, even when it has none
    labels: list[str] = []  # what enforced label rules that fired add, in rule order

    for rule in rules:  # mutate
        if rule.action is _REWRITE:
            results.append(_rewrite(bindings, rule, target))
    listed = fused.values(bindings.shared()) if fused is not None else None  # on the rewritten arguments
    # each rule's value from the list, or UNSET (evaluated on its own)
    given = repeat(UNSET) if listed is None else fused.given(listed)  # type: ignore[union-attr]
    for rule, value in zip(rules, given, strict=False):  # validate (``given`` may be endless)
        if rule.action is _REWRITE:
            continue
        result, produced = _validate(bindings, rule, tool_name, value)
        results.append(result)
        if result.effect is _APPROVE and rule.approval is not None:
            approvals.append(_requirement(rule.approval, result.message))
        if result.effect is _SKIP and not skip_seen:
            skip_seen, skip_result = True, produced
        if result.labels and result.outcome is _FIRED:
            labels.extend(result.labels)

    verdict, decided_by, message = choose_verdict(
        results, default if stage is _REQUEST else Verdict.ALLOW, tool_name
    )
    outcome = (skip_result if verdict is _SKIP else None) if stage is _REQUEST else bindings.base["result"]
    # positional, in Decision's field order: keywords cost a tenth of a decision's Python time
    return Decision(verdict, stage, bindings.base["args"], original_args, revision, message, decided_by, outcome,
                    approvals, results, (time.perf_counter() - started) * 1e6,
                    tuple(dict.fromkeys(labels)) if labels else ()), listed


def rule_activation(engine: Engine, policies: Sequence[CompiledPolicy], base: dict[str, Any],
                    rule: CompiledRule) -> Any:
    """The activation ``rule`` reads, with every file variable it reads bound (for explain and coverage)."""
    bindings = _Bindings(engine, policies, dict(base))
    values = bindings.values_for(rule.policy_index, rule.variables_read)
    return engine.activation({**bindings.base, "variables": values})


def condition_of(engine: Engine, policies: Sequence[CompiledPolicy],
                 base: dict[str, Any]) -> Callable[[CompiledRule], bool]:
    """Whether a rule's ``when`` holds on ``base``, its file variables bound as a decision binds them, each
    evaluated once (for the tool listing). A failure raises ``CelEvaluationError``."""
    bindings = _Bindings(engine, policies, base)

    def holds(rule: CompiledRule) -> bool:
        return rule.when is None or bindings.evaluate(rule, rule.when) is True

    return holds


def _failed(rule: CompiledRule, bindings: _Bindings, exc: Exception, started: float) -> RuleResult:
    effect = failure_verdict(rule.on_error) if rule.mode is Mode.ENFORCE else None
    message = f"The policy rule {rule.id} could not be evaluated, so the call is denied." if effect else None
    return RuleResult(rule.id, rule.action, Outcome.ERROR, _since(started), rule.mode, message,
                      bindings.explain_error(rule, str(exc)), effect)


def _rewrite(bindings: _Bindings, rule: CompiledRule, target: str) -> RuleResult:
    started = time.perf_counter()
    try:
        if rule.when is not None and not bindings.evaluate(rule, rule.when):  # a bool: evaluate checks
            return RuleResult(rule.id, rule.action, _NOT_FIRED, _since(started), rule.mode)
        assert rule.rewrite is not None
        changed = _apply(bindings, rule, rule.rewrite, bindings.base[target])
    except (CelEvaluationError, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep input
        return _failed(rule, bindings, exc, started)
    if rule.mode is _AUDIT_MODE:
        return RuleResult(rule.id, rule.action, _AUDITED, _since(started), rule.mode)
    rewritten = changed != bindings.base[target]
    if rewritten:
        bindings.replace(target, changed)
    return RuleResult(rule.id, rule.action, _FIRED, _since(started), rule.mode, rewritten=rewritten)


def _apply(bindings: _Bindings, rule: CompiledRule, rewrite: CompiledRewrite, value: Any) -> Any:
    # All `set` values are computed against the value as it was before this rule.
    computed = [(path, bindings.evaluate(rule, expr)) for path, expr in rewrite.set]
    for path, new in computed:
        value = set_path(value, path, new)
    for path in rewrite.remove:
        value = remove_path(value, path)
    if rewrite.redact:
        value = redact(value, rewrite.redact)
    return value


def _validate(bindings: _Bindings, rule: CompiledRule, tool_name: str, listed: Any) -> tuple[RuleResult, Any]:
    """One validate-phase rule; ``listed`` is its condition's value from the listed program, or UNSET."""
    started = time.perf_counter()
    produced: Any = None
    if rule.when_message is not None:  # when and message in one evaluation, if it gives a clear answer
        both = listed
        if both is UNSET:
            try:
                both = rule.when_message.evaluate(bindings.activation(rule))
            except CelEvaluationError:
                both = None  # the two expressions on their own say what failed
        if type(both) is list:
            if not both:
                return RuleResult(rule.id, rule.action, _NOT_FIRED, _since(started), rule.mode), None
            if len(both) == 1 and type(both[0]) is str:
                return _fired(rule, started, both[0], None), None
    elif type(listed) is bool and not listed:
        return RuleResult(rule.id, rule.action, _NOT_FIRED, _since(started), rule.mode), None
    try:
        if rule.when is not None and listed is not True and not bindings.evaluate(rule, rule.when):
            return RuleResult(rule.id, rule.action, _NOT_FIRED, _since(started), rule.mode), None
        if rule.action is _SKIP_ACTION:
            produced = (bindings.evaluate(rule, rule.result_expression) if rule.result_expression
                        else rule.result)
        elif rule.action is _LABEL_ACTION:
            labels = rule.labels if rule.labels_expression is None else \
                checked_labels(bindings.evaluate(rule, rule.labels_expression))
            outcome = _AUDITED if rule.mode is _AUDIT_MODE else _FIRED
            # positional, in RuleResult's field order (as in evaluate_call)
            return RuleResult(rule.id, rule.action, outcome, _since(started), rule.mode, None, None, None, False,
                              labels), None
    except CelEvaluationError as exc:
        return _failed(rule, bindings, exc, started), None
    if rule.message_expression is None:
        message, message_error = rule.message, None
    else:
        message, message_error = _message(bindings, rule)
    return _fired(rule, started, message, message_error), produced


def _fired(rule: CompiledRule, started: float, message: str | None, message_error: str | None) -> RuleResult:
    if rule.mode is _AUDIT_MODE:
        return RuleResult(rule.id, rule.action, _AUDITED, _since(started), rule.mode, message, message_error)
    return RuleResult(rule.id, rule.action, _FIRED, _since(started), rule.mode, message, message_error,
                      ACTION_VERDICT[rule.action])


def _message(bindings: _Bindings, rule: CompiledRule) -> tuple[str | None, str | None]:
    if rule.message_expression is not None:
        try:
            return str(bindings.evaluate(rule, rule.message_expression)), None
        except CelEvaluationError as exc:
            fallback = rule.message or DEFAULT_MESSAGES.get(ACTION_VERDICT[rule.action] or Verdict.ALLOW)
            return fallback, f"messageExpression failed: {exc}"
    return rule.message, None


def _requirement(template: ApprovalRequirement, message: str | None) -> ApprovalRequirement:
    if not message or message == template.message:
        return template
    # the constructor, not dataclasses.replace: a third of the cost, and this is per call
    return ApprovalRequirement(template.rule, message, template.approvers, template.timeout_seconds,
                               template.on_timeout, template.via, template.valid_for_seconds,
                               template.hold_seconds)


def _since(started: float) -> float:
    return (time.perf_counter() - started) * 1e6
