"""Compile a validated policy file: every CEL expression, regex and path, once, at load time.

A compile failure is returned as a positioned diagnostic (file:line:col, rule id, hint); it never
reaches request time. The result is a ``CompiledPolicy`` of ``CompiledRule`` records that the
evaluator only reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.durations import parse_duration
from gateway.core.errors import CelCompileError
from gateway.core.limits import (
    DEFAULT_APPROVAL_HOLD_SECONDS,
    DEFAULT_APPROVAL_VALID_SECONDS,
    MAX_EXPRESSION_CHARS,
    MAX_REDACT_PATTERN_CHARS,
)
from gateway.core.sourcemap import Path, YamlDocument
from gateway.policy.cel import VARIABLES, Engine, ExprType, Program
from gateway.policy.cel.pure_check import INPUTS, Analysis, CelTypeError, analyse
from gateway.policy.cel.types import DYN, ObjectType, fmt_type
from gateway.policy.compiled import CompiledPolicy, CompiledRewrite, CompiledRule, Expression, Variable
from gateway.policy.decision import Action, ApprovalRequirement, Stage, Verdict
from gateway.policy.model import PolicyFile, RuleSpec
from gateway.policy.rewrite import PathParts, parse_path
from gateway.policy.shape import check_shape
from gateway.policy.tallies import compile_tallies
from gateway.policy.typed_env import RESULT, TypeEnvironment, rewrite_problem

__all__ = ["CompiledPolicy", "CompiledRewrite", "CompiledRule", "Expression", "Variable", "compile_policy"]



class _Compiler:
    def inlined(self, expr: Expression | None, running: dict[str, Program]) -> Expression | None:
        """``expr`` running with the file variables it reads written in, or ``expr`` unchanged.

        Rules then evaluate in the one shared activation instead of an activation per set of
        variables, which is most of a decision's cost. The engine writes in the variables' trees
        (``Engine.inline``); where that is not a plain substitution the variables are bound instead.
        """
        if expr is None or not expr.variables_read:
            return expr
        program = self.engine.inline(expr.program, running)
        if program is None:
            return expr
        return Expression(expr.source, program, expr.expected, expr.references, frozenset(), expr.type)

    def __init__(self, doc: YamlDocument, engine: Engine) -> None:
        self.doc = doc
        self.engine = engine
        self.diagnostics: list[Diagnostic] = []
        self.unbounded: set[str] = set()  # file variables computed from inputs of unbounded size
        self.proves: frozenset[str] = frozenset()  # what the last expression typed proves when true

    def errors(self) -> int:
        """How many errors (not warnings) were reported so far."""
        return sum(1 for d in self.diagnostics if d.severity is Severity.ERROR)

    def error(self, path: Path, code: str, message: str, rule: str | None, hint: str | None = None,
              *, key: bool = False) -> None:
        pos = self.doc.position(path, key=key)
        self.diagnostics.append(Diagnostic(code, message, self.doc.file, pos.line, pos.column, rule, hint))

    def expression(self, source: str, expected: ExprType, path: Path, rule: str | None,
                   env: dict[str, Any], proven: frozenset[str] = frozenset(),
                   variables: Sequence[str] = VARIABLES) -> Expression | None:
        """Compile with the engine, then check in the typed environment ``env``; None after an error.

        ``proven``: the fields the rule's ``when`` proves present (its other expressions run only then);
        ``variables``: the names it may read (a tally reads fewer than a rule).
        """
        if len(source) > MAX_EXPRESSION_CHARS:
            self.error(path, "cel-too-long", f"expression is longer than {MAX_EXPRESSION_CHARS} characters",
                       rule, "split it into variables")
            return None
        try:
            program = self.engine.compile(source, expected)
            found = self.typed(source, expected, env, proven, variables)
        except CelCompileError as exc:
            self.cel_diagnostic(exc, source, path, rule, variables=variables)
            return None
        for warning in found.warnings:
            self.cel_diagnostic(warning, source, path, rule, Severity.WARNING)
        names = frozenset(name for name, _, _ in found.variable_uses)
        return Expression(source, program, expected, found.references,
                          None if found.reads_all_variables else names, found.type)

    def typed(self, source: str, expected: ExprType, env: dict[str, Any],
              proven: frozenset[str] = frozenset(), variables: Sequence[str] = VARIABLES) -> Analysis:
        """The typed checker's findings: the front end types whatever either engine runs."""
        self.proves = frozenset()
        found = analyse(source, expected, env, unbounded=frozenset(self.unbounded), proven=proven,
                        variables=variables)
        self.proves = found.proves
        return found

    def cel_diagnostic(self, exc: CelCompileError, source: str, path: Path, rule: str | None,
                       severity: Severity = Severity.ERROR, variables: Sequence[str] = VARIABLES) -> None:
        pos = self.doc.locate(path, exc.line, exc.column)
        hint = exc.hint if isinstance(exc, CelTypeError) and exc.hint else _CEL_HINTS.get(exc.code)
        if exc.code == "cel-undeclared" and variables != VARIABLES:
            hint = f"this expression may read only {', '.join(variables)} and the documented functions"
        self.diagnostics.append(Diagnostic(exc.code, f"{exc.message} in {source!r}", self.doc.file, pos.line,
                                           pos.column, rule, hint, severity))


_CEL_HINTS = {
    "cel-undeclared": f"expressions may read only {', '.join(VARIABLES)} and the documented functions",
    "cel-type": "make the expression produce the expected type (compare, or convert with string()/bool())",
    "cel-compile": "check the CEL syntax near this column",
    "cel-field": "see the typed environment in docs/policy-language.md",
}


def compile_policy(
    spec: PolicyFile, doc: YamlDocument, engine: Engine, policy_index: int, first_ordinal: int,
    rule_indices: list[int] | None = None, types: TypeEnvironment | None = None,
    tally_indices: list[int] | None = None,
) -> tuple[CompiledPolicy, list[Diagnostic]]:
    """Compile one validated policy file; diagnostics are empty when it compiled cleanly.

    ``rule_indices`` gives each rule's index in the file when some rules were left out because
    they failed validation (so positions still point at the right lines). ``types`` is what is
    known of ``env``, ``usage`` and the tools' arguments (by default: nothing, so they are dynamic), and
    the set's tally ids; ``tally_indices`` is ``rule_indices`` for the file's tallies.
    """
    indices = rule_indices if rule_indices is not None else list(range(len(spec.rules)))
    types = types or TypeEnvironment()
    c = _Compiler(doc, engine)
    variables: list[Variable] = []
    seen_vars: set[str] = set()
    var_types: dict[str, Any] = {}  # a variable reads only the ones before it
    for i, var in enumerate(spec.variables):
        if var.name in seen_vars:
            c.error(("variables", i, "name"), "duplicate-variable", f"variable {var.name!r} is defined twice",
                    None, "give each variable a unique name")
        seen_vars.add(var.name)
        env = types.for_rule(None, ObjectType("variables", dict(var_types)), args_known=False)
        expr = c.expression(var.expression, ExprType.ANY, ("variables", i, "expression"), None, env)
        var_types[var.name] = expr.type if expr is not None else DYN
        if expr is not None and (expr.references & INPUTS or expr.variables_read is None
                                 or expr.variables_read & c.unbounded):
            c.unbounded.add(var.name)
        if expr is not None:
            earlier = {v.name: v for v in variables}
            needs = _closure(expr.variables_read, earlier)
            written = {v.name: v.running for v in variables if v.running is not None}
            running = expr.program if not expr.variables_read else engine.inline(expr.program, written)
            variables.append(Variable(var.name, expr, needs, running))
    all_variables = ObjectType("variables", var_types)

    rules: list[CompiledRule] = []
    seen_ids: dict[str, int] = {}
    by_name = {v.name: v for v in variables}
    for i, rule in zip(indices, spec.rules, strict=True):
        full_id = f"{spec.policy}/{rule.id}"
        if rule.id in seen_ids:
            c.error(("rules", i, "id"), "duplicate-rule",
                    f"rule id {rule.id!r} is already used by rule #{seen_ids[rule.id] + 1} of this file",
                    full_id, "rule ids must be unique within a policy file")
            continue
        seen_ids[rule.id] = i
        # A rule that also decides resources or prompts sees their arguments too: args is dynamic then.
        env = types.for_rule(rule.tools, all_variables, args_known=rule.resources is None and rule.prompts is None)
        compiled = _compile_rule(c, spec, rule, ("rules", i), full_id, policy_index, first_ordinal + i, by_name, env)
        if compiled is not None:
            rules.append(compiled)
    tallies = compile_tallies(c, spec, types, tally_indices)
    return CompiledPolicy(spec.policy, doc.file, spec.description, spec.default, tuple(variables),
                          tuple(rules), tuple(tallies)), c.diagnostics


def _compile_rule(
    c: _Compiler, spec: PolicyFile, rule: RuleSpec, path: Path, full_id: str, policy_index: int,
    ordinal: int, variables: dict[str, Variable], env: dict[str, Any],
) -> CompiledRule | None:
    before = c.errors()
    check_shape(c, rule, path, full_id)
    when = c.expression(rule.when, ExprType.BOOL, (*path, "when"), full_id, env) if rule.when is not None else None
    proven = c.proves if when is not None else frozenset()
    message_expr = (c.expression(rule.messageExpression, ExprType.STRING, (*path, "messageExpression"), full_id,
                                 env, proven) if rule.messageExpression is not None else None)
    result_expr = (c.expression(rule.resultExpression, ExprType.ANY, (*path, "resultExpression"), full_id, env,
                                proven) if rule.resultExpression is not None else None)
    rewrite = _compile_rewrite(c, rule, path, full_id, env, proven) if rule.rewrite is not None else None
    labels_expr = _labels_expression(c, rule, path, full_id, env, proven)
    approval = None
    if rule.action is Action.APPROVE:
        spec_a = rule.approval
        approval = ApprovalRequirement(
            rule=full_id,
            message=rule.message or "",
            approvers=tuple(spec_a.approvers) if spec_a else (),
            timeout_seconds=parse_duration(spec_a.timeout) if spec_a else 900.0,
            on_timeout=Verdict(spec_a.on_timeout) if spec_a else Verdict.REJECT,
            via=spec_a.via if spec_a else "page",
            valid_for_seconds=parse_duration(spec_a.valid_for) if spec_a and spec_a.valid_for is not None
            else DEFAULT_APPROVAL_VALID_SECONDS,
            hold_seconds=parse_duration(spec_a.hold) if spec_a and spec_a.hold is not None
            else DEFAULT_APPROVAL_HOLD_SECONDS,
        )
    if c.errors() > before:  # a warning never drops a rule
        return None
    exprs = [e for e in (when, message_expr, result_expr, labels_expr) if e is not None]
    if rewrite is not None:
        exprs.extend(e for _, e in rewrite.set)
    # What the rule reads, variables resolved: from the expressions as written.
    refs = frozenset().union(*(e.references for e in exprs)) if exprs else frozenset()
    reads: frozenset[str] = frozenset()
    for e in exprs:
        reads |= _closure(e.variables_read, variables)
    refs = refs.union(*(variables[n].expression.references for n in reads))
    # How it runs: with variables written in where possible; the rest need their values bound.
    inlines = {name: v.running for name, v in variables.items() if v.running is not None}
    when, message_expr, result_expr, labels_expr = (c.inlined(e, inlines)
                                                    for e in (when, message_expr, result_expr, labels_expr))
    when_message = None
    if when is not None and message_expr is not None and rule.action not in (Action.SKIP, Action.REWRITE):
        when_message = c.engine.join(when.program, message_expr.program)
    if rewrite is not None:
        rewrite = CompiledRewrite(tuple((p, c.inlined(e, inlines) or e) for p, e in rewrite.set),
                                  rewrite.remove, rewrite.redact)
    running = [e for e in (when, message_expr, result_expr, labels_expr) if e is not None]
    if rewrite is not None:
        running.extend(e for _, e in rewrite.set)
    needed: frozenset[str] = frozenset()
    for e in running:
        needed |= _closure(e.variables_read, variables)
    pos = c.doc.position(path)
    return CompiledRule(
        id=full_id, policy_index=policy_index, ordinal=ordinal, action=rule.action, stage=rule.stage,
        tools=tuple(rule.tools) if rule.tools is not None else None, when=when, message=rule.message,
        message_expression=message_expr, on_error=rule.on_error or spec.defaults.on_error,
        mode=rule.mode or spec.defaults.mode, file=c.doc.file, line=pos.line, column=pos.column,
        description=rule.description, approval=approval, rewrite=rewrite, result=rule.result,
        result_expression=result_expr, references=refs, variables_needed=needed, variables_read=reads,
        resources=tuple(rule.resources) if rule.resources is not None else None,
        prompts=tuple(rule.prompts) if rule.prompts is not None else None,
        when_message=when_message, labels=tuple(dict.fromkeys(rule.labels or ())), labels_expression=labels_expr,
    )


def _labels_expression(c: _Compiler, rule: RuleSpec, path: Path, rule_id: str, env: dict[str, Any],
                       proven: frozenset[str]) -> Expression | None:
    """A label rule's ``labelsExpression``, which must type as a list of strings (or dyn)."""
    if rule.labelsExpression is None or rule.action is not Action.LABEL:
        return None
    here = (*path, "labelsExpression")
    expr = c.expression(rule.labelsExpression, ExprType.ANY, here, rule_id, env, proven)
    if expr is not None and expr.type not in _LABEL_TYPES:
        c.error(here, "cel-type", f"labelsExpression must give a list of strings, but it is {fmt_type(expr.type)}",
                rule_id, 'give a list, e.g. ["untrusted"], or result.text.contains("x") ? ["x"] : []')
        return None
    return expr


_LABEL_TYPES = frozenset({DYN, ("list", "string"), ("list", DYN)})


def _closure(read: frozenset[str] | None, known: dict[str, Variable]) -> frozenset[str]:
    """The known variables ``read`` names, with everything they need in turn."""
    names = frozenset(known) if read is None else read & known.keys()
    return names.union(*(known[n].needs for n in names))


def _compile_rewrite(c: _Compiler, rule: RuleSpec, path: Path, rule_id: str, env: dict[str, Any],
                     proven: frozenset[str]) -> CompiledRewrite:
    assert rule.rewrite is not None
    before = c.errors()
    sets: list[tuple[PathParts, Expression]] = []
    rewritten = RESULT if rule.stage is Stage.RESPONSE else env["args"]
    for target, source in rule.rewrite.set.items():
        here = (*path, "rewrite", "set", target)
        parts = _path(c, target, here, rule_id)
        expr = c.expression(source, ExprType.ANY, here, rule_id, env, proven)
        problem = rewrite_problem(rewritten, parts, expr.type) if parts is not None and expr is not None else None
        if problem is not None:
            c.error(here, problem[0], problem[1], rule_id, "set a value of the type the tool's input schema gives",
                    key=True)
        elif parts is not None and expr is not None:
            sets.append((parts, expr))
    removes = []
    for i, target in enumerate(rule.rewrite.remove):
        parts = _path(c, target, (*path, "rewrite", "remove", i), rule_id)
        if parts is not None:
            removes.append(parts)
    patterns = []
    for i, pattern in enumerate(rule.rewrite.redact):
        here = (*path, "rewrite", "redact", i)
        if len(pattern) > MAX_REDACT_PATTERN_CHARS:
            c.error(here, "invalid-regex", "redact pattern is too long", rule_id)
            continue
        try:
            patterns.append(re.compile(pattern))
        except re.error as exc:
            c.error(here, "invalid-regex", f"invalid regular expression {pattern!r}: {exc}", rule_id,
                    "redact takes Python regular expressions; escape special characters with \\")
    if not (sets or removes or patterns) and c.errors() == before:
        c.error((*path, "rewrite"), "invalid-value", "the rewrite block changes nothing", rule_id,
                "add set, remove or redact")
    return CompiledRewrite(tuple(sets), tuple(removes), tuple(patterns))


def _path(c: _Compiler, target: str, here: Path, rule_id: str) -> PathParts | None:
    try:
        return parse_path(target)
    except ValueError as exc:
        c.error(here, "invalid-path", str(exc), rule_id, "write paths like 'limit' or 'filter.owner'", key=True)
        return None
