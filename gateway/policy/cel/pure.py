"""The fallback engine: CEL in pure Python on top of ``cel-python`` (``celpy``).

celpy parses with Lark and interprets the tree, but it has no type checker and its run-time
semantics drift from cel-cpp's in places that matter for policies. This engine therefore adds:

* a small static checker over the Lark tree (``pure_check``), driven by one signature table
  (``signatures.SIGNATURES``), that reports undeclared names and functions, operator and
  function overload mismatches of statically known types, and the expression's result type, with
  positions that match the C++ engine (the operator, the ``(`` of a call, the ``.`` of a selection);
* operators and functions registered as celpy functions (``pure_signatures``, ``pure_values``)
  that follow cel-cpp: equality across types is false and across numeric types compares values,
  ordering compares numbers across int/uint/double, arithmetic needs both operands of one type,
  ints overflow, ``&&``/``||`` absorb errors, a missing map key is an error;
* an evaluator subclass (this module) for identifiers, operators (``&&``/``||`` short-circuit),
  ``has()``, field selection and the macros, run on a tree without single-child wrapper nodes.

Known differences from the C++ engine:

* ``strings.quote()`` and ``format()`` of the strings extension are not provided (compile error).
* Timestamps and durations hold microseconds, not nanoseconds: ``duration("1ns")`` is zero.
* Error messages are worded like cel-cpp's, not identically; error kinds and positions match.
* A function call with a leading dot (``.size(x)``) is not supported.
* Nesting is capped at ``pure_check.MAX_TREE_DEPTH`` parse levels, about ten nested parentheses,
  calls or lists (cel-cpp allows 32), so that evaluation fits Python's default recursion limit.
* Iterating a map (``m.map(k, k)``, ``m.all(...)``) visits keys in insertion order; cel-cpp's order
  is unspecified and differs, so only order-independent results agree.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import celpy
from celpy.celtypes import BoolType, ListType, MapType, StringType
from celpy.evaluation import Activation, CELEvalError, Evaluator
from lark import Tree

from gateway.core.errors import CelEvaluationError
from gateway.core.limits import MAX_INLINED_NODES
from gateway.policy.cel.base import VARIABLES, ExprType, Program
from gateway.policy.cel.pure_check import MACROS, MAX_TREE_DEPTH, OPERATORS, PASS_THROUGH, check, parser, unwrap
from gateway.policy.cel.pure_signatures import TYPE_VALUES, runtime_functions
from gateway.policy.cel.pure_values import MISSING, first_error, index, kind_of, lookup, no_overload, to_cel, to_plain
from gateway.policy.cel.syntax import conditional_tree, depth_beyond, inline_tree

__all__ = ["PureEngine"]

# --- run time: celpy's interpreter with our identifiers, has(), selection and macros ---

_RUNTIME_NAMES = {**OPERATORS, "relation_in": "_in_"}
# Single-child wrappers the evaluator can skip; celpy inspects ``primary`` and its child, so they stay.
_COLLAPSIBLE = PASS_THROUGH - {"primary", "paren_expr"}


def _collapse(tree: Tree[Any]) -> Tree[Any]:
    """The tree without single-child wrappers: a literal is two levels deep instead of ten."""
    kids = [_collapse(kid) if isinstance(kid, Tree) else kid for kid in tree.children]
    if tree.data in _COLLAPSIBLE and len(kids) == 1 and isinstance(kids[0], Tree):
        return kids[0]
    return Tree(tree.data, kids, tree.meta)


def _runnable(tree: Tree[Any]) -> bool:
    """Whether a combined tree is within the sizes a written one is held to."""
    tokens = sum(1 for _ in tree.scan_values(lambda _: True))  # about the C++ engine's count of nodes
    return depth_beyond(tree, MAX_TREE_DEPTH, chains=False) is None and tokens <= MAX_INLINED_NODES


class _Evaluator(Evaluator):
    """celpy's interpreter on a collapsed tree, with operators dispatched directly."""

    def __init__(self, ast: Tree[Any], activation: Activation, scope: Mapping[str, Any]) -> None:
        super().__init__(ast=ast, activation=activation)
        self.scope = scope

    def expr(self, tree: Tree[Any]) -> Any:  # after collapsing, only ``c ? a : b`` is left
        cond = self.visit(tree.children[0])
        if isinstance(cond, BoolType):
            return self.visit(tree.children[1] if cond else tree.children[2])
        return first_error(cond) or no_overload("_?_:_", cond)

    def conditionalor(self, tree: Tree[Any]) -> Any:
        return self.logic(tree, absorbing=True)

    def conditionaland(self, tree: Tree[Any]) -> Any:
        return self.logic(tree, absorbing=False)

    def logic(self, tree: Tree[Any], absorbing: bool) -> Any:
        # false && x is false and true || x is true even when x is an error or not a bool.
        left = self.visit(tree.children[0])
        if isinstance(left, BoolType) and bool(left) is absorbing:
            return left
        right = self.visit(tree.children[1])
        values = [v for v in (left, right) if isinstance(v, BoolType)]
        if any(bool(v) is absorbing for v in values):
            return BoolType(absorbing)
        if len(values) == 2:
            return BoolType(not absorbing)
        return first_error(left, right) or no_overload(OPERATORS[tree.data], left, right)

    def relation(self, tree: Tree[Any]) -> Any:
        operator_tree, right = tree.children
        function = self.activation.functions[_RUNTIME_NAMES[operator_tree.data]]
        return function(self.visit(operator_tree.children[0]), self.visit(right))

    addition = multiplication = relation

    def unary(self, tree: Tree[Any]) -> Any:
        operator_tree, operand = tree.children
        return self.activation.functions[OPERATORS[operator_tree.data]](self.visit(operand))

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        value = self.scope.get(name, MISSING)
        if value is not MISSING:
            return value
        if name in TYPE_VALUES:
            return TYPE_VALUES[name]
        return CELEvalError(f'no value given for variable "{name}"')

    def sub_evaluator(self, ast: Tree[Any]) -> Evaluator:
        return _Evaluator(ast, self.activation, self.scope)

    def macro_has_eval(self, exprlist: Tree[Any]) -> Any:
        operand, field = unwrap(exprlist.children[0]).children
        target = self.visit(operand)
        if kind_of(target) == "map":
            return BoolType(lookup(target, str(field)) is not MISSING)
        return first_error(target) or CELEvalError(f"has() cannot select a field of {kind_of(target)}")

    def member_dot(self, tree: Tree[Any]) -> Any:
        operand, field = tree.children
        target = self.visit(operand)
        if kind_of(target) != "map":
            return first_error(target) or CELEvalError(f"{kind_of(target)} has no field '{field}'")
        return index(target, StringType(str(field)))

    def mapinits(self, tree: Tree[Any]) -> Any:
        values: list[Any] = self.visit_children(tree)
        result = MapType()
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if first_error(key, value):
                return first_error(key, value)
            if kind_of(key) not in ("int", "uint", "bool", "string"):
                return CELEvalError(f"unsupported map key type: {kind_of(key)}")
            if lookup(result, key) is not MISSING:
                return CELEvalError(f"duplicate map key {to_plain(key)!r}")
            result[key] = value
        return result

    def member_dot_arg(self, tree: Tree[Any]) -> Any:
        name = str(tree.children[1])
        args = tree.children[2].children if len(tree.children) == 3 else []
        if name not in MACROS or not (len(args) == 2 or (name == "map" and len(args) == 3)):
            return super().member_dot_arg(tree)
        target = self.visit(tree.children[0])
        if kind_of(target) not in ("list", "map"):
            return first_error(target) or CELEvalError(f"{name}() cannot range over {kind_of(target)}")
        variable = str(unwrap(args[0]).children[0])
        return self.comprehension(name, list(target), variable, args[1:])

    def comprehension(self, name: str, items: list[Any], variable: str, bodies: list[Any]) -> Any:
        results, error, count = [], None, 0
        for item in items:
            scope = {**self.scope, variable: item}
            value = _Evaluator(bodies[0], self.activation, scope).visit(bodies[0])
            if name == "map" and len(bodies) == 1:
                if isinstance(value, CELEvalError):
                    return value
                results.append(value)
            elif not isinstance(value, BoolType):  # an error or a non-bool predicate
                step = {"all": "_&&_", "exists": "_||_"}.get(name)
                value = first_error(value) or no_overload(step or "_?_:_", value)
                if step is None:
                    return value
                error = error or value  # all() and exists() absorb errors, like && and ||
            elif name in ("all", "exists"):
                if bool(value) is (name == "exists"):
                    return value
            elif name == "exists_one":
                count += bool(value)
            elif value and name == "filter":
                results.append(item)
            elif value:  # map(x, predicate, transform)
                mapped = _Evaluator(bodies[1], self.activation, scope).visit(bodies[1])
                if isinstance(mapped, CELEvalError):
                    return mapped
                results.append(mapped)
        if name in ("all", "exists"):
            return error or BoolType(name == "all")
        return BoolType(count == 1) if name == "exists_one" else ListType(results)


class _Runner(celpy.InterpretedRunner):
    """celpy's interpreted runner, with our evaluator and the functions bound once."""

    def __init__(self, environment: celpy.Environment, ast: Tree[Any], functions: Any = None) -> None:
        super().__init__(environment, ast, functions)
        self.base = self.new_activation()

    def evaluate(self, context: Any) -> Any:
        return _Evaluator(self.ast, self.base, context).evaluate()


class _Program:
    __slots__ = ("_runner", "tree")

    def __init__(self, runner: _Runner, tree: Tree[Any]) -> None:
        self._runner = runner
        self.tree = tree  # the syntax tree it runs (uncollapsed; shared, never changed)

    def evaluate(self, activation: Any) -> Any:
        """The plain Python result, or ``CelEvaluationError`` with a short message."""
        try:
            return to_plain(self._runner.evaluate(activation))
        except CELEvalError as exc:
            text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "evaluation failed"
            # celpy appends its whole activation to some messages; keep only the first clause.
            raise CelEvaluationError(re.sub(r" \(in (activation|container) .*", "", text, flags=re.S)[:300]) from exc
        except RecursionError:
            raise CelEvaluationError("evaluation is nested too deeply") from None
        except Exception as exc:  # a celpy internal failure is still only this expression's failure
            raise CelEvaluationError(f"evaluation failed ({type(exc).__name__})") from exc


class PureEngine:
    """CEL via cel-python, checked and aligned with the C++ engine."""

    name = "cel-python"

    def __init__(self, variables: Sequence[str] = VARIABLES) -> None:
        """``variables``: the names expressions may read (a policy's by default; identity mappings read others)."""
        self._variables = tuple(variables)
        limit = sys.getrecursionlimit()
        self._env = celpy.Environment(runner_class=_Runner)
        sys.setrecursionlimit(limit)  # celpy sets a process-wide 2500; MAX_TREE_DEPTH is our bound
        parser()  # built once, here, rather than on the first compile
        self._functions = runtime_functions()

    def compile(self, source: str, expected: ExprType) -> _Program:
        """Parse, bound, type-check and build ``source`` once; ``CelCompileError`` with a position."""
        return self._program(check(source, expected, self._variables))

    def _program(self, tree: Tree[Any]) -> _Program:
        return _Program(self._env.program(_collapse(tree), functions=self._functions), tree)  # type: ignore[arg-type]

    def inline(self, program: Program, variables: Mapping[str, Program]) -> _Program | None:
        """``program`` with the trees of the file variables it reads written in (see ``Engine``)."""
        assert isinstance(program, _Program)
        trees = {name: value.tree for name, value in variables.items() if isinstance(value, _Program)}
        tree = inline_tree(program.tree, "variables", trees)
        return self._program(tree) if tree is not None and _runnable(tree) else None

    def join(self, when: Program, message: Program) -> _Program | None:
        """``when ? [message] : []`` from the two syntax trees (see ``Engine``)."""
        assert isinstance(when, _Program) and isinstance(message, _Program)
        tree = conditional_tree(when.tree, message.tree)
        return self._program(tree) if _runnable(tree) else None

    def fuse(self, programs: Sequence[Program]) -> None:
        """Not done here (see ``Engine``): celpy's cost is in the evaluation, not in the call; one by one."""
        del programs

    def activation(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The declared variables present in ``data``, converted to celpy values once per round."""
        bound = {}
        for name in self._variables:
            if name not in data:
                continue
            if not isinstance(data[name], Mapping):
                raise CelEvaluationError(f"input cannot be given to CEL: '{name}' must be a map")
            try:
                bound[name] = to_cel(data[name])
            except (TypeError, ValueError, RecursionError) as exc:
                raise CelEvaluationError(f"input cannot be given to CEL: {name}: {exc}") from exc
        return bound
