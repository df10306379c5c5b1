"""The CEL front end's syntax tree: each expression parsed once, and the one set of walks over it.

Every reader of an expression (compile's typed check, the catalog checks, explain's clauses,
coverage, the cel-python engine) takes its tree from ``parse``, which caches by source, so an
expression is parsed once however many of them read it. The tree is celpy's CEL grammar as a
Lark tree with a position on every token; nothing may change it (it is shared).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

from gateway.core.errors import CelCompileError
from gateway.core.limits import MAX_CACHED_PARSE_TREES
from gateway.policy.cel.base import VARIABLES

__all__ = ["MACROS", "MAX_SYNTAX_DEPTH", "PASS_THROUGH", "Reference", "chain", "comprehends", "conditional_tree",
           "dotted", "flatten", "free_variables", "guarded", "has_paths", "inline_tree", "line_column", "may_read",
           "parse", "parser", "references", "string_literal", "unwrap", "walk"]

# Receiver-style calls that are comprehensions, not functions.
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Grammar rules that are only a wrapper when they have a single child.
PASS_THROUGH = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
                          "unary", "member", "primary", "paren_expr"})
# Parse levels the front end walks at most: beyond what the C++ engine accepts (about 320 levels:
# some 30 nested parentheses or 300 chained &&), so only an expression no engine runs is refused here.
MAX_SYNTAX_DEPTH = 400
_TRIPLE = ("'''", '"""')


@functools.cache
def parser() -> Lark:
    """celpy's CEL grammar as a Lark parser that keeps a position on every token, built once."""
    # celpy's own parser turns true/false into tokens without positions; this one keeps them,
    # so every node has a position for error messages. Same grammar and options, same trees.
    def keep_position(token: Token) -> Token:
        if token.value in ("true", "false"):
            return Token.new_borrow_pos("BOOL_LIT", token.value, token)
        return token

    # celpy's grammar file, found without importing celpy: its interpreter stays off the default engine's path
    spec = importlib.util.find_spec("celpy")
    if spec is None or spec.origin is None:
        raise RuntimeError("cel-python (celpy) is not installed; its CEL grammar is the front end's")
    grammar = Path(spec.origin).with_name("cel.lark").read_text()
    return Lark(grammar, parser="lalr", start="expr", g_regex_flags=re.M, propagate_positions=True,
                maybe_placeholders=False, priority="invert", lexer_callbacks={"IDENT": keep_position})


def line_column(source: str, pos: int) -> tuple[int, int]:
    """1-based line and column of offset ``pos`` in ``source``."""
    return source.count("\n", 0, pos) + 1, pos - source.rfind("\n", 0, pos)


@functools.lru_cache(maxsize=MAX_CACHED_PARSE_TREES)
def parse(source: str) -> Tree[Any]:
    """The syntax tree of ``source`` (shared: nothing may change it); ``CelCompileError`` with a position."""
    def error(pos: int, what: str) -> CelCompileError:
        return CelCompileError(f"Syntax error: {what}", *line_column(source, pos))

    try:
        tree = parser().parse(source)
    except UnexpectedToken as exc:
        if exc.token.type == "$END":
            raise error(len(source), "unexpected end of expression") from None
        raise error(exc.token.start_pos or 0, f"unexpected {exc.token.value!r}") from None
    except UnexpectedCharacters as exc:
        pos = exc.pos_in_stream or 0
        raise error(pos, f"unexpected character {source[pos:pos + 1]!r}") from None
    except UnexpectedEOF:
        raise error(len(source), "unexpected end of expression") from None
    except LarkError as exc:
        raise CelCompileError(f"Syntax error: {exc}") from None
    deepest = depth_beyond(tree, MAX_SYNTAX_DEPTH)
    if deepest is not None:
        raise CelCompileError("expression is nested too deeply", *line_column(source, deepest))
    return tree


def depth_beyond(tree: Tree[Any], limit: int, chains: bool = True) -> int | None:
    """The offset of the first node deeper than ``limit`` levels, or None.

    With ``chains``, a chain of one operator (``a && b && c ...``) counts as one level: the front
    end's walks read it as a list (``chain``) and the C++ engine balances it, so a long chain is
    not deep for either (the cel-python engine's interpreter recurses on it: it counts every level).
    """
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return int(getattr(node.meta, "start_pos", 0))
        stack.extend((kid, depth + (not chains or kid.data != node.data or node.data not in _CHAINS))
                     for kid in node.children if isinstance(kid, Tree))
    return None


_CHAINS = frozenset({"conditionaland", "conditionalor"})


def chain(node: Tree[Any]) -> list[Tree[Any]]:
    """The operands of a chain of ``node``'s operator, left to right (``[node]``'s only child when alone)."""
    out: list[Tree[Any]] = []
    while node.data in _CHAINS and len(node.children) == 2:
        out.append(node.children[1])
        node = node.children[0]
    out.append(node.children[0] if node.data in _CHAINS and len(node.children) == 1 else node)
    return out[::-1]


def unwrap(tree: Tree[Any]) -> Tree[Any]:
    """The first node under ``tree`` that is not a single-child wrapper."""
    while tree.data in PASS_THROUGH and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        tree = tree.children[0]
    return tree


def dotted(tree: Tree[Any]) -> str | None:
    """``a.b.c`` when the tree is a chain of plain field selections on an identifier."""
    node = unwrap(tree)
    if node.data == "ident":
        return str(node.children[0])
    if node.data == "member_dot":
        base = dotted(node.children[0])
        return None if base is None else f"{base}.{node.children[1]}"
    return None


def string_literal(tree: Tree[Any]) -> tuple[str, int] | None:
    """The text and offset of a plain quoted string literal (no escapes, not raw, not triple-quoted)."""
    node = unwrap(tree)
    if node.data != "literal" or not isinstance(node.children[0], Token):
        return None
    token = node.children[0]
    text = str(token)
    if token.type != "STRING_LIT" or "\\" in text or text[:1] not in "'\"" or text[:3] in _TRIPLE:
        return None
    return text[1:-1], (token.start_pos or 0) + 1


def has_paths(tree: Tree[Any], positive: bool) -> frozenset[str]:
    """The fields ``tree`` proves present when it is true (``positive``) or false: ``has(a.b)``,
    ``'b' in a``, and conjunctions (disjunctions) and negations of these."""
    node = unwrap(tree)
    kids = node.children
    if node.data == "unary" and kids[0].data == "unary_not":
        return has_paths(kids[1], not positive)
    if node.data == ("conditionaland" if positive else "conditionalor") and len(kids) == 2:
        return frozenset().union(*(has_paths(part, positive) for part in chain(node)))
    if not positive:
        return frozenset()
    if node.data == "ident_arg" and str(kids[0]) == "has" and len(kids) == 2 and len(kids[1].children) == 1:
        path = dotted(kids[1].children[0])
        return frozenset({path}) if path else frozenset()
    if node.data == "relation" and kids[0].data == "relation_in":
        key, container = string_literal(kids[0].children[0]), dotted(kids[1])
        if key and re.fullmatch(r"\w+", key[0]) and container:
            return frozenset({f"{container}.{key[0]}"})
    return frozenset()


def flatten(tree: Tree[Any]) -> tuple[str, list[Tree[Any]]] | None:
    """A condition's top-level ``&&`` or ``||`` and its operands (``a && b && c`` → [a, b, c]); None without one."""
    top = unwrap(tree)
    operator = {"conditionalor": "||", "conditionaland": "&&"}.get(top.data)
    if operator is None or len(top.children) < 2:
        return None
    out: list[Tree[Any]] = []
    node = top
    while True:
        left, right = node.children[0], node.children[-1]
        out.append(right)
        left_node = unwrap(left)
        if left_node.data == top.data and len(left_node.children) >= 2:
            node = left_node
            continue
        out.append(left)
        break
    return operator, list(reversed(out))


# --- what an expression reads ---

@dataclass(frozen=True, slots=True)
class Reference:
    """``root.name`` (or ``root["name"]``) read by an expression, at ``offset`` in its source."""

    root: str
    name: str
    offset: int


def walk(tree: Tree[Any], bound: frozenset[str] = frozenset()) -> Iterator[tuple[Tree[Any], frozenset[str]]]:
    """Every node with the macro variables in scope at it."""
    stack = [(tree, bound)]
    while stack:
        node, scope = stack.pop()
        yield node, scope
        if node.data == "member_dot_arg" and str(node.children[1]) in MACROS and len(node.children) == 3:
            receiver, _, arglist = node.children
            args = [a for a in arglist.children if isinstance(a, Tree)]
            variable = _ident(args[0]) if args else None
            if variable is not None:
                stack.append((receiver, scope))
                stack.extend((a, scope | {variable}) for a in args[1:])
                continue
        stack.extend((k, scope) for k in node.children if isinstance(k, Tree))


def _ident(tree: Tree[Any]) -> str | None:
    node = unwrap(tree)
    return str(node.children[0]) if node.data == "ident" else None


def _root_name(tree: Tree[Any], scope: frozenset[str]) -> str | None:
    """The declared variable ``tree`` is, when it is one (not a macro variable of the same name)."""
    name = _ident(tree)
    return name if name is not None and name in VARIABLES and name not in scope else None


def free_variables(tree: Tree[Any]) -> Iterator[str]:
    """Declared variables the expression reads (macro variables excepted)."""
    for node, scope in walk(tree):
        if node.data in ("ident", "dot_ident"):
            name = str(node.children[0])
            if name in VARIABLES and name not in scope:
                yield name


def references(tree: Tree[Any], bound: frozenset[str] = frozenset()) -> Iterator[Reference]:
    """``root.name`` and ``root["name"]`` selections on declared variables."""
    for node, scope in walk(tree, bound):
        if node.data == "member_dot":
            operand, field = node.children
            root = _root_name(operand, scope)
            if root is not None and isinstance(field, Token):
                yield Reference(root, str(field), field.start_pos or 0)
        elif node.data == "member_index":
            container, key = node.children
            root = _root_name(container, scope)
            literal = string_literal(key)
            if root is not None and literal is not None:
                yield Reference(root, literal[0], literal[1])


def may_read(tree: Tree[Any], root: str, name: str) -> bool:
    """Whether the expression may read ``root.name``: it selects it, or uses ``root`` other than by selecting a
    field by name (passed whole, indexed by a computed key), which could reach it."""
    uses = sum(1 for found in free_variables(tree) if found == root)
    selections = [r for r in references(tree) if r.root == root]
    return any(r.name == name for r in selections) or uses > len(selections)


def comprehends(tree: Tree[Any]) -> bool:
    """Whether the expression has a comprehension (``all``, ``exists``, ``map``, ...)."""
    return any(node.data == "member_dot_arg" and str(node.children[1]) in MACROS for node in tree.iter_subtrees())


def guarded(tree: Tree[Any]) -> set[tuple[str, str]]:
    """The ``(root, name)`` selections the expression tests with ``has(root.name)``."""
    found: set[tuple[str, str]] = set()
    for node, scope in walk(tree):
        if node.data == "ident_arg" and str(node.children[0]) == "has" and len(node.children) == 2:
            for ref in references(cast(Tree[Any], node.children[1]), scope):
                found.add((ref.root, ref.name))
    return found


# --- trees built from trees (the cel-python engine's inlining and joining; nothing is changed in place) ---

def _parenthesised(tree: Tree[Any]) -> Tree[Any]:
    return Tree("primary", [Tree("paren_expr", [tree])])


def inline_tree(tree: Tree[Any], root: str, values: Mapping[str, Tree[Any]]) -> Tree[Any] | None:
    """A new tree with each ``root.NAME`` replaced by ``values[NAME]``; None when ``root`` is read any
    other way (``has(root.x)``, ``root["x"]``, as a whole), a value is missing, or a comprehension
    binds ``root`` or a name a value reads."""
    sites: dict[int, str] = {}
    reads = 0
    binds: set[str] = set()
    for node, _ in walk(tree):
        if node.data == "member_dot" and _ident(node.children[0]) == root:
            sites[id(node)] = str(node.children[1])
        elif node.data in ("ident", "dot_ident") and str(node.children[0]) == root:
            reads += 1
        elif node.data == "member_dot_arg" and str(node.children[1]) in MACROS and len(node.children) == 3:
            first = next((a for a in node.children[2].children if isinstance(a, Tree)), None)
            binds.update([name] if first is not None and (name := _ident(first)) else [])
    if reads != len(sites) or root in binds or any(name not in values for name in sites.values()):
        return None
    if any(binds & set(free_names(values[name])) for name in set(sites.values())):
        return None
    tested = {id(sub) for node in tree.iter_subtrees() if node.data == "ident_arg" and str(node.children[0]) == "has"
              for sub in node.iter_subtrees()}
    if tested & sites.keys():  # has(root.x) asks whether it is bound, which a written-in value cannot answer
        return None
    return _replaced(tree, sites, values)


def free_names(tree: Tree[Any]) -> Iterator[str]:
    """Every identifier the tree reads (comprehension variables included)."""
    for node in tree.iter_subtrees():
        if node.data in ("ident", "dot_ident"):
            yield str(node.children[0])


def _replaced(tree: Tree[Any], sites: Mapping[int, str], values: Mapping[str, Tree[Any]]) -> Tree[Any]:
    if id(tree) in sites:
        return _parenthesised(values[sites[id(tree)]])
    kids = [_replaced(kid, sites, values) if isinstance(kid, Tree) else kid for kid in tree.children]
    return Tree(tree.data, kids, tree.meta)


def conditional_tree(when: Tree[Any], message: Tree[Any]) -> Tree[Any]:
    """``when ? [message] : []`` as a new tree over the two."""
    listed = Tree("primary", [Tree("list_lit", [Tree("exprlist", [message])])])
    return Tree("expr", [_parenthesised(when), listed, Tree("primary", [Tree("list_lit", [])])])
