"""The CEL type checker over the front end's tree: the front end's (``analyse``) and cel-python's (``check``).

It reports undeclared names and functions, overload mismatches of statically known types and a
wrong result type, at positions that match the C++ engine (the operator, the ``(`` of a call, the
``.`` of a selection).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lark import Token, Tree

from gateway.core.errors import CelCompileError
from gateway.core.limits import MAX_COMPREHENSION_NESTING
from gateway.policy.cel.base import VARIABLES, ExprType
from gateway.policy.cel.signatures import BOOL, CPP_ONLY, DYN, SIGNATURES, TYPE_NAMES
from gateway.policy.cel.strings import INT64_MAX, INT64_MIN, UINT64_MAX
from gateway.policy.cel.syntax import (
    MACROS,
    PASS_THROUGH,
    chain,
    depth_beyond,
    has_paths,
    line_column,
    parse,
    parser,
    string_literal,
    unwrap,
)
from gateway.policy.cel.syntax import dotted as dotted_path
from gateway.policy.cel.types import ObjectType, compatible, fmt_type, join_types, substitute, suggestion, unify

__all__ = ["INPUTS", "MACROS", "MAX_TREE_DEPTH", "OPERATORS", "PASS_THROUGH", "Analysis", "CelTypeError", "analyse",
           "check", "parser", "unwrap"]

_VARIABLE_TYPE = ("map", "string", DYN)  # every declared variable
# The variables whose size the caller controls: comprehensions over them are what the cost bound counts.
INPUTS = frozenset({"args", "original_args", "result"})
# celpy's interpreter recurses about five Python frames per parse-tree level. 120 levels (about ten
# nested parentheses, calls or lists) stay near 600 frames, leaving room for the caller under
# Python's default recursion limit of 1000, which this engine does not raise.
MAX_TREE_DEPTH = 120

# Parse-tree operator rules by the CEL function name they stand for.
OPERATORS = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
    "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in", "addition_add": "_+_",
    "addition_sub": "_-_", "multiplication_mul": "_*_", "multiplication_div": "_/_",
    "multiplication_mod": "_%_", "unary_not": "!_", "unary_neg": "-_",
    "conditionalor": "_||_", "conditionaland": "_&&_",
}
_SKIP = re.compile(r"(?:\s+|//[^\n]*)*")
_FLOAT = re.compile(r"-?(?:\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?)")
_ESCAPE = re.compile(r"\\(?:[abfnrtv\"'\\]|[0-3][0-7]{2}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


def _parse(source: str) -> Tree[Any]:
    """The front end's tree of ``source`` (``syntax.parse``), its depth bounded for this engine's evaluator."""
    tree = parse(source)
    deepest = depth_beyond(tree, MAX_TREE_DEPTH, chains=False)
    if deepest is not None:
        raise CelCompileError(
            "expression is nested too deeply for the cel-python engine "
            "(about ten levels of parentheses, calls or lists at most)", *line_column(source, deepest))
    return tree


class CelTypeError(CelCompileError):
    """A problem the typed environment found, with a hint naming what would be right."""

    def __init__(self, message: str, line: int, column: int, kind: str, hint: str | None = None) -> None:
        super().__init__(message, line, column, kind)
        self.hint = hint


def _string_literal(tree: Tree[Any]) -> str | None:
    found = string_literal(tree)
    return found[0] if found and re.fullmatch(r"\w+", found[0]) else None


class _Checker:
    """Types a parse tree; raises ``CelCompileError`` at the first problem, in source order.

    Given an environment (``env``: the declared type of each variable) it is the typed
    environment's checker: it also records what the expression reads (``references``, each
    ``variables.NAME`` with its span), warns about optional fields read without ``has()``, and
    bounds comprehension nesting (``limits``).
    """

    def __init__(self, source: str, env: Mapping[str, Any] | None = None, limits: bool = False,
                 unbounded: frozenset[str] = frozenset(), variables: Collection[str] = VARIABLES,
                 every_engine: bool = False) -> None:
        self.source = source
        self.variables = variables  # the declared names (a policy's, or an identity mapping's)
        # the front end's check (``analyse``) types what either engine runs; cel-python's (``check``) its own
        self.signatures = {**SIGNATURES, **CPP_ONLY} if every_engine else SIGNATURES
        self.every_engine = every_engine
        self.env = env
        self.limits = limits
        self.unbounded = unbounded  # file variables computed from inputs of unbounded size
        self.references: set[str] = set()
        self.variable_uses: list[tuple[str, int, int]] = []  # variables.NAME: name, start, end
        self.variables_idents = 0
        self.warnings: list[CelTypeError] = []
        self.guards: frozenset[str] = frozenset()
        self.in_has = False
        self.ranges: list[str] = []  # iteration variables of the enclosing dynamic-size comprehensions

    def guarded(self, tree: Tree[Any], scope: dict[str, Any], proven: frozenset[str]) -> Any:
        """The type of ``tree`` where the fields ``proven`` are known to be present."""
        saved = self.guards
        self.guards = saved | proven
        try:
            return self.type_of(tree, scope)
        finally:
            self.guards = saved

    def error(self, message: str, pos: int | None, kind: str = "cel-compile") -> CelCompileError:
        return CelCompileError(message, *line_column(self.source, pos or 0), kind=kind)

    def after(self, end: int | Tree[Any] | None) -> int:
        """Position of the first token after ``end`` (an offset or a subtree)."""
        offset = end if isinstance(end, int) else getattr(getattr(end, "meta", None), "end_pos", 0)
        match = _SKIP.match(self.source, offset)
        return match.end() if match else offset

    def type_of(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        kids = tree.children
        if tree.data in PASS_THROUGH and len(kids) == 1:
            return self.type_of(kids[0], scope)
        if tree.data == "expr":  # cond ? a : b
            types = [self.type_of(kids[0], scope), self.guarded(kids[1], scope, has_paths(kids[0], True)),
                     self.guarded(kids[2], scope, has_paths(kids[0], False))]
            return self.call("_?_:_", types, self.after(kids[0]))
        if tree.data in ("conditionalor", "conditionaland"):  # a chain, left to right, without recursing on it
            parts = chain(tree)
            result, proven = self.type_of(parts[0], scope), frozenset[str]()
            for before, part in itertools.pairwise(parts):
                proven |= has_paths(before, tree.data == "conditionaland")
                result = self.call(OPERATORS[tree.data], [result, self.guarded(part, scope, proven)],
                                   self.after(before))
            return result
        if tree.data in ("relation", "addition", "multiplication"):
            left, right, name = kids[0].children[0], kids[1], OPERATORS[kids[0].data]
        elif tree.data == "unary":
            operand = self.type_of(kids[1], scope)
            return self.call(OPERATORS[kids[0].data], [operand], getattr(kids[0].meta, "start_pos", 0))
        else:
            return getattr(self, tree.data)(tree, scope)
        return self.call(name, [self.type_of(left, scope), self.type_of(right, scope)], self.after(left))

    def call(self, name: str, types: list[Any], pos: int, member: bool = False) -> Any:
        overloads = [o for o in self.signatures.get(name, ())
                     if (o.member if member else o.plain) and len(o.params) == len(types)]
        if not overloads:
            raise self.error(f"undeclared reference to '{name}'", pos, "cel-undeclared")
        results = []
        for overload in overloads:
            bound: dict[str, Any] = {}
            if all(unify(p, t, bound) for p, t in zip(overload.params, types, strict=True)):
                results.append(substitute(overload.result, bound))
        if not results:
            shown = ", ".join(map(fmt_type, types))
            raise self.error(f"found no matching overload for '{name}' applied to '({shown})'", pos)
        return join_types(results)

    def declared(self, name: str, scope: dict[str, Any]) -> Any:
        if name in scope:
            return scope[name]
        if name in self.variables:
            return self.env.get(name, _VARIABLE_TYPE) if self.env is not None else _VARIABLE_TYPE
        return ("type", TYPE_NAMES[name]) if name in TYPE_NAMES else None

    def ident(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        token = cast(Token, tree.children[0])
        found = self.declared(str(token), scope)
        if found is None:
            raise self.error(f"undeclared reference to '{token}'", token.start_pos, "cel-undeclared")
        if token in self.variables and token not in scope:
            self.references.add(str(token))
            self.variables_idents += token == "variables"
        return found

    def dot_ident(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        return self.ident(tree, {})

    def dot_ident_arg(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        if self.every_engine:  # .f(x): f in the root namespace, which is the only one
            return self.ident_arg(tree, scope)
        raise self.error("a function call with a leading '.' is not supported", tree.meta.start_pos)

    def member_object(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        name = dotted_path(tree.children[0]) or "message"
        raise self.error(f"undeclared reference to '{name}'", tree.meta.start_pos, "cel-undeclared")

    def literal(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        token = cast(Token, tree.children[0])
        text, kind, pos = str(token), token.type, token.start_pos or 0
        if kind in ("INT_LIT", "UINT_LIT"):
            digits = text.rstrip("uU").lower()
            value = int(digits.replace("0x", ""), 16 if "0x" in digits else 10)
            if not (INT64_MIN <= value <= INT64_MAX if kind == "INT_LIT" else value <= UINT64_MAX):
                raise self.error(f"invalid {'int' if kind == 'INT_LIT' else 'uint'} literal", pos)
            return "int" if kind == "INT_LIT" else "uint"
        if kind == "FLOAT_LIT":
            if not _FLOAT.fullmatch(text):
                raise self.error("Syntax error: invalid number", pos + text.find(".") + 1)
            return "double"
        if kind in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            body = text.lstrip("bB")
            if body[:1] not in ("r", "R") and "\\" in _ESCAPE.sub("", body):
                raise self.error("Syntax error: invalid escape sequence", pos)
            return "bytes" if kind == "BYTES_LIT" else "string"
        return {"BOOL_LIT": "bool", "NULL_LIT": "null_type"}[kind]

    def list_lit(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        items = tree.children[0].children if tree.children else []
        return ("list", join_types([self.type_of(item, scope) for item in items]))

    def map_lit(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        entries = [self.type_of(e, scope) for e in (tree.children[0].children if tree.children else [])]
        return ("map", join_types(entries[0::2]), join_types(entries[1::2]))

    def member_dot(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        operand, field = cast(tuple[Tree[Any], Token], tree.children)
        dot = self.source.rindex(".", 0, field.start_pos)
        dotted = dotted_path(tree)
        if dotted is not None and self.declared(dotted.split(".")[0], scope) is None:
            raise self.error(f"undeclared reference to '{dotted}'", dot, "cel-undeclared")
        target = self.type_of(operand, scope)
        root = unwrap(operand)
        if root.data == "ident" and str(root.children[0]) == "variables" and "variables" not in scope:
            self.variable_uses.append((str(field), root.meta.start_pos, field.end_pos or 0))
        if isinstance(target, ObjectType):
            return self.field(target, field, dot, dotted)
        if isinstance(target, tuple) and target[0] == "map":
            return target[2]
        if target == DYN:
            return DYN
        raise self.error(f"expression of type '{fmt_type(target)}' cannot be the operand of a select operation", dot)

    def field(self, target: ObjectType, name: Token, dot: int, dotted: str | None) -> Any:
        """The type of ``operand.name`` on an object type: unknown fields are errors."""
        key = str(name)
        found = target.field_type(key)
        guarded = self.in_has or (dotted is not None and self.proven(dotted))
        if found is None and target.probe:
            if not guarded:
                self.warnings.append(CelTypeError(
                    f"{target.name} has no field '{key}'{suggestion(key, target.fields)} in this configuration, "
                    "so reading it fails unless something guards it",
                    *line_column(self.source, dot), "cel-missing-field",
                    f"guard it: has({dotted}) && ..., or set it (the fields of {target.name} are: "
                    f"{', '.join(sorted(target.fields)) or 'none'})"))
            return DYN
        if found is None:
            known = ", ".join(sorted(target.fields)) or "none"
            raise CelTypeError(f"undefined field '{key}' of {target.name}{suggestion(key, target.fields)}",
                               *line_column(self.source, dot), "cel-field",
                               f"the fields of {target.name} are: {known}")
        if key in target.optional and not guarded and dotted is not None:
            self.warnings.append(CelTypeError(
                f"'{dotted}' may be absent ({target.name} does not require '{key}'); reading it then is an error",
                *line_column(self.source, dot), "cel-optional-field",
                f"guard it: has({dotted}) && ..., or has({dotted}) ? {dotted} : DEFAULT"))
        return found

    def member_index(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        container, key = tree.children
        types = [self.type_of(container, scope), self.type_of(key, scope)]
        result = self.call("_[_]", types, self.after(container))
        name = _string_literal(key)
        if isinstance(types[0], ObjectType) and name is not None:
            # obj["known"] has the field's type; another key stays dyn (the way to read extra keys)
            return types[0].field_type(name) or DYN
        return result

    def ident_arg(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        name, args = cast(Token, tree.children[0]), (tree.children[1].children if len(tree.children) == 2 else [])
        if name == "has" and len(args) == 1:
            selection = unwrap(args[0])
            if selection.data != "member_dot":
                raise self.error("has() argument must be a field selection", args[0].meta.start_pos)
            self.in_has, saved = True, self.in_has
            try:
                self.member_dot(selection, scope)
            finally:
                self.in_has = saved
            return BOOL
        return self.call(str(name), [self.type_of(arg, scope) for arg in args], self.after(name.end_pos))

    def member_dot_arg(self, tree: Tree[Any], scope: dict[str, Any]) -> Any:
        receiver, name = cast(tuple[Tree[Any], Token], tree.children[:2])
        args = tree.children[2].children if len(tree.children) == 3 else []
        paren = self.after(name.end_pos)
        if name in MACROS and (len(args) == 2 or (name == "map" and len(args) == 3)):
            return self.macro(str(name), receiver, args, scope, paren)
        namespace = dotted_path(receiver)
        if namespace is not None and f"{namespace}.{name}" in self.signatures and \
                self.declared(namespace.split(".")[0], scope) is None:  # strings.quote(x): a namespaced function
            return self.call(f"{namespace}.{name}", [self.type_of(arg, scope) for arg in args], paren)
        types = [self.type_of(receiver, scope), *(self.type_of(arg, scope) for arg in args)]
        return self.call(str(name), types, paren, member=True)

    def macro(self, name: str, receiver: Tree[Any], args: list[Any], scope: dict[str, Any], pos: int) -> Any:
        variable = unwrap(args[0])
        if variable.data != "ident":
            raise self.error(f"{name}() variable name must be a simple identifier", args[0].meta.start_pos)
        target = self.type_of(receiver, scope)
        if isinstance(target, ObjectType):
            target = ("map", "string", target.rest if target.open else DYN)
        if target != DYN and not (isinstance(target, tuple) and target[0] in ("list", "map")):
            raise self.error(f"expression of type '{fmt_type(target)}' cannot be the range of a comprehension "
                             "(must be list, map, or dynamic)", receiver.meta.start_pos)
        element = target[1] if isinstance(target, tuple) else DYN
        inner = {**scope, str(variable.children[0]): element}
        dynamic = self.limits and self.bound_cost(name, receiver, pos)
        if dynamic:
            self.ranges.append(str(variable.children[0]))
        try:
            bodies = [self.type_of(arg, inner) for arg in args[1:]]
        finally:
            if dynamic:
                self.ranges.pop()
        if (name != "map" or len(bodies) == 2) and not compatible(bodies[0], BOOL):
            step = {"all": ("_&&_", [BOOL, bodies[0]]), "exists": ("_||_", [BOOL, bodies[0]]),
                    "exists_one": ("_?_:_", [bodies[0], "int", "int"])}
            op, shown = step.get(name, ("_?_:_", [bodies[0], ("list", element), ("list", element)]))
            raise self.error(f"found no matching overload for '{op}' applied to "
                             f"'({', '.join(map(fmt_type, shown))})'", pos)
        if name in ("map", "filter"):
            return ("list", bodies[-1] if name == "map" else element)
        return BOOL

    def proven(self, dotted: str) -> bool:
        """Whether a has() or ``in`` around this point proves ``dotted`` (or a field below it) present."""
        return any(g == dotted or g.startswith(dotted + ".") for g in self.guards)

    def bound_cost(self, name: str, receiver: Tree[Any], pos: int) -> bool:
        """Whether ``receiver`` has a size the caller controls; refuse nesting too many such ranges."""
        reads = {str(t) for t in receiver.scan_values(lambda v: isinstance(v, Token) and v.type == "IDENT")}
        uses = {str(node.children[1]) for node in receiver.iter_subtrees()
                if node.data == "member_dot" and dotted_path(node.children[0]) == "variables"}
        if not (reads & (INPUTS | set(self.ranges)) or uses & self.unbounded):
            return False
        if len(self.ranges) >= MAX_COMPREHENSION_NESTING:
            raise CelTypeError(
                f"expression cost is unbounded: {name}() is comprehension number {len(self.ranges) + 1} nested over "
                f"inputs of unbounded size (at most {MAX_COMPREHENSION_NESTING} may nest)",
                *line_column(self.source, pos), "cel-cost",
                "compute the inner part in a variable, range over a literal list, or test membership with 'in'")
        return True


@dataclass
class Analysis:
    """What the typed environment's checker found in one expression."""

    type: Any
    references: frozenset[str]
    variable_uses: list[tuple[str, int, int]] = field(default_factory=list)
    reads_all_variables: bool = False  # ``variables`` used other than as variables.NAME
    warnings: list[CelTypeError] = field(default_factory=list)
    proves: frozenset[str] = frozenset()  # fields present whenever it is true (a rule's other parts run then)


def analyse(source: str, expected: ExprType, env: Mapping[str, Any] | None, limits: bool = True,
            unbounded: frozenset[str] = frozenset(), proven: frozenset[str] = frozenset(),
            variables: Collection[str] = VARIABLES) -> Analysis:
    """Parse and type ``source`` in a typed environment; ``CelCompileError`` at the first problem.

    ``unbounded`` names the file variables computed from inputs of unbounded size (see ``INPUTS``);
    ``proven`` the fields known present where it runs (what the rule's ``when`` proves).
    """
    tree = parse(source)  # the front end's depth bound, not the cel-python engine's (``check`` adds that)
    checker = _Checker(source, env, limits, unbounded, variables, every_engine=True)
    checker.guards = proven
    result = checker.type_of(tree, {})
    _check_result(result, expected)
    return Analysis(result, frozenset(checker.references), checker.variable_uses,
                    checker.variables_idents != len(checker.variable_uses), checker.warnings, has_paths(tree, True))


def _check_result(result: Any, expected: ExprType) -> None:
    want = {ExprType.BOOL: BOOL, ExprType.STRING: "string"}.get(expected)
    if want is not None and result not in (want, DYN):
        shown = fmt_type(result).replace("(", "<").replace(")", ">").replace("null_type", "null")
        raise CelCompileError(f"expression must evaluate to {expected}, but it is {shown}", kind="cel-type")


def check(source: str, expected: ExprType, variables: Collection[str] = VARIABLES) -> Tree[Any]:
    """The parse tree of ``source`` once it passes every check; ``CelCompileError`` with a position."""
    tree = _parse(source)
    _check_result(_Checker(source, variables=variables).type_of(tree, {}), expected)
    return tree
