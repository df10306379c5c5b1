"""Policy files checked against the tool catalog: what `gateway check --config` / `--tools` adds.

Each mistake here loads cleanly, because it is only a mistake with respect to the tools that exist:

* ``unknown-tool`` (error): a rule's or a tally's ``tools:`` pattern that matches no tool in the catalog, at
  the pattern itself, with a did-you-mean (``github_lsit_*`` → ``github_list_*``; ``github_list_[*``, whose ``[``
  is never closed and so is a literal ``[`` no tool name has → ``github_list_*``).
* ``rule-never-fires`` (warning): a rule whose ``when`` reads nothing, has no comprehension, and is
  false.
* ``rule-shadowed`` (warning): a rule that can never decide a call, because an enforced rule without
  ``when`` and with a stricter verdict covers all its tools at its stage (the strictest verdict wins).
* ``unknown-argument``: ``args.NAME`` / ``original_args.NAME`` (also through ``variables``) where no
  tool the rule covers has an argument NAME in its input schema. An error, since the read fails on
  every call that lacks the argument; a warning only when the expression guards it with
  ``has(args.NAME)`` and some schema does not forbid other arguments (``additionalProperties:
  false``), so a call might carry it; nothing when one of the tools accepts any argument (no
  ``properties``, or ``additionalProperties`` true or a schema).

The checks work on the parsed and validated files, not on a loaded set, so that they run (and their
findings print) even when the set has other errors. References come from a CEL parse of each
expression (comments and strings are understood), never from a text search.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any

from lark import Tree
from pydantic import ValidationError

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import CelCompileError, CelEvaluationError
from gateway.core.globs import glob_problem
from gateway.core.sourcemap import Path, YamlDocument
from gateway.policy.catalog import Catalog, CatalogTool
from gateway.policy.cel import VARIABLES, Engine, ExprType
from gateway.policy.cel.syntax import comprehends, free_variables, guarded, line_column, parse, references
from gateway.policy.decision import ACTION_VERDICT, STRICTNESS, Mode, OnError, Stage, Verdict
from gateway.policy.model import RuleSpec, TallySpec, VariableSpec
from gateway.policy.tool_patterns import closest, suggest_patterns, unclosed_bracket

__all__ = ["check_against_catalog", "check_documents"]

_ARG_ROOTS = ("args", "original_args")


def check_against_catalog(paths: Sequence[str | FsPath], catalog: Catalog | None, engine: Engine) -> list[Diagnostic]:
    """The catalog findings for the policy files under ``paths`` (files that do not parse are skipped:
    loading them reports why). Without a catalog only what needs none is checked (``rule-never-fires``)."""
    from gateway.policy.load import discover, read_document  # load imports compile; keep this module light

    files, _ = discover(paths)
    documents = [doc for doc in (read_document(f)[0] for f in files) if doc is not None]
    return check_documents(documents, catalog, engine)


def check_documents(documents: Sequence[YamlDocument], catalog: Catalog | None, engine: Engine) -> list[Diagnostic]:
    """The catalog findings for parsed policy files, sorted by position."""
    found: list[Diagnostic] = []
    seen: set[tuple[str, int, int, str]] = set()
    rules: list[_Rule] = []
    for doc in documents:
        check = _FileCheck(doc, catalog, engine)
        for d in check.run():
            key = (d.file, d.line, d.column, d.code)
            if key not in seen:  # a variable read by several rules is reported once
                seen.add(key)
                found.append(d)
        rules.extend(check.summaries)
    found.extend(_shadowed(rules, catalog))
    found.sort(key=lambda d: (d.file, d.line, d.column))
    return found


@dataclass(frozen=True, slots=True)
class _Rule:
    """What the shadowing check needs of one rule."""

    id: str
    file: str
    line: int
    column: int
    stage: Stage
    enforced: bool
    verdict: Verdict | None
    unconditional: bool
    can_fail: bool  # it has an expression, whose failure rejects (on_error: deny)
    tools: tuple[str, ...] | None  # its valid patterns; None: every tool


class _FileCheck:
    def __init__(self, doc: YamlDocument, catalog: Catalog | None, engine: Engine) -> None:
        self.doc = doc
        self.catalog = catalog
        self.engine = engine
        self.out: list[Diagnostic] = []
        self.summaries: list[_Rule] = []
        data = doc.data if isinstance(doc.data, dict) else {}
        self.policy = str(data.get("policy", "?"))
        self.rules = _valid(RuleSpec, data.get("rules"))
        self.tallies = _valid(TallySpec, data.get("tallies"))
        variables = _valid(VariableSpec, data.get("variables"))
        self.variables = {spec.name: (("variables", i, "expression"), spec.expression) for i, spec in variables}
        defaults = data.get("defaults")
        mode = defaults.get("mode") if isinstance(defaults, dict) else None
        self.default_mode = Mode(mode) if mode in tuple(Mode) else Mode.ENFORCE
        on_error = defaults.get("on_error") if isinstance(defaults, dict) else None
        self.default_on_error = OnError(on_error) if on_error in tuple(OnError) else OnError.DENY

    def run(self) -> list[Diagnostic]:
        for index, rule in self.rules:
            self.rule(index, rule)
        for index, tally in self.tallies:
            if self.catalog is not None:
                self.dead(self.catalog, tally.tools, ("tallies", index), f"tally {self.policy}/{tally.id}",
                          "the tally never counts")
        return self.out

    def emit(self, path: Path, code: str, message: str, rule: str, hint: str | None, severity: Severity,
             inside: tuple[int, int] | None = None) -> None:
        pos = self.doc.locate(path, *inside) if inside else self.doc.position(path)
        self.out.append(Diagnostic(code, message, self.doc.file, pos.line, pos.column, rule, hint, severity))

    def rule(self, index: int, rule: RuleSpec) -> None:
        rule_id = f"{self.policy}/{rule.id}"
        here: Path = ("rules", index)
        pos = self.doc.position(here)
        if rule.tools is None and (rule.resources is not None or rule.prompts is not None):
            if rule.when is not None:  # decides no tool call: the tool checks do not apply
                self.constant_false(rule.when, (*here, "when"), rule_id)
            return
        tools = None if rule.tools is None else tuple(p for p in rule.tools if glob_problem(p) is None)
        self.summaries.append(_Rule(rule_id, self.doc.file, pos.line, pos.column, rule.stage,
                                    (rule.mode or self.default_mode) is Mode.ENFORCE, ACTION_VERDICT[rule.action],
                                    rule.when is None, _can_fail(rule, self.default_on_error), tools))
        if rule.when is not None:
            self.constant_false(rule.when, (*here, "when"), rule_id)
        if self.catalog is None:
            return
        covered = self.patterns(self.catalog, rule, here, rule_id)
        if covered:
            self.arguments(rule, here, rule_id, covered)

    def patterns(self, catalog: Catalog, rule: RuleSpec, here: Path, rule_id: str) -> list[CatalogTool]:
        """Report patterns that match no tool; the tools the rule covers."""
        if rule.tools is None:
            return catalog.matching(None)
        self.dead(catalog, rule.tools, here, rule_id, "the rule never applies")
        return catalog.matching([p for p in rule.tools if glob_problem(p) is None])

    def dead(self, catalog: Catalog, tools: Sequence[str], here: Path, owner: str, never: str) -> None:
        """Report the patterns of ``tools`` that match no tool (``never``: what then never happens)."""
        dead = [p for p in tools if glob_problem(p) is None and not catalog.matching([p]) and not catalog.declares(p)]
        names = sorted(catalog.tools)
        for index, pattern in enumerate(tools):
            if pattern not in dead:
                continue
            message = f"no tool matches {pattern!r}"
            if unclosed_bracket(pattern):
                message += " (its '[' is never closed, so it is a literal '[', which no tool name has)"
            if len(dead) == len(tools):
                message += f"; {never}"
            suggestions = suggest_patterns(pattern, names)
            hint = (f"did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else
                    f"none of the {len(names)} tools in the catalog is close; `gateway tools` lists them")
            self.emit((*here, "tools", index), "unknown-tool", message, owner, hint, Severity.ERROR)

    def constant_false(self, source: str, path: Path, rule_id: str) -> None:
        """Warn about a ``when`` that reads nothing and is false: the rule can never fire."""
        tree = _parse(source)
        if tree is None or any(True for _ in free_variables(tree)) or comprehends(tree):
            return  # a comprehension is not evaluated here: its cost is the loader's to bound
        try:
            activation = self.engine.activation({name: {} for name in VARIABLES})
            value = self.engine.compile(source, ExprType.BOOL).evaluate(activation)
        except (CelCompileError, CelEvaluationError):
            return  # loading reports a compile error; a constant that fails is on_error's business
        if value is False:
            self.emit(path, "rule-never-fires", f"'when' is always false ({source.strip()!r} reads nothing)",
                      rule_id, "remove the rule, or write the condition it was meant to test", Severity.WARNING)

    def arguments(self, rule: RuleSpec, here: Path, rule_id: str, covered: list[CatalogTool]) -> None:
        """Report ``args.NAME`` reads that no covered tool's schema has."""
        known: set[str] = set()
        closed = True
        for tool in covered:
            shape = _argument_names(tool.input_schema)
            if shape is None:
                return  # a covered tool accepts any argument: nothing can be unknown
            known |= shape[0]
            closed = closed and shape[1]
        for path, source in self.expressions(rule, here):
            tree = _parse(source)
            if tree is None:
                continue
            tested = guarded(tree)
            for ref in references(tree):
                if ref.root not in _ARG_ROOTS or ref.name in known:
                    continue
                # a plain read of an argument no schema lists fails on every call that lacks it
                # (then on_error decides); one the expression guards with has() is only always false
                error = closed or (ref.root, ref.name) not in tested
                where = line_column(source, ref.offset)
                tools = ", ".join(t.name for t in covered[:3]) + (f" and {len(covered) - 3} more"
                                                                  if len(covered) > 3 else "")
                close = closest(ref.name, sorted(known))
                hint = (f"did you mean {' or '.join(f'{ref.root}.{c}' for c in close)}?" if close else
                        f"the arguments are: {', '.join(sorted(known)) or 'none'}")
                message = f"{ref.root}.{ref.name}: no argument {ref.name!r} in the input schema of {tools}"
                if not error:
                    message += " (guarded by has(); their schemas do not forbid other arguments)"
                self.emit(path, "unknown-argument", message, rule_id, hint,
                          Severity.ERROR if error else Severity.WARNING, where)

    def expressions(self, rule: RuleSpec, here: Path) -> Iterator[tuple[Path, str]]:
        """The rule's expressions, then those of the file variables it reads (transitively), each once."""
        own: list[tuple[Path, str]] = []
        if rule.when is not None:
            own.append(((*here, "when"), rule.when))
        if rule.messageExpression is not None:
            own.append(((*here, "messageExpression"), rule.messageExpression))
        for key in ("resultExpression", "labelsExpression"):
            if getattr(rule, key) is not None:
                own.append(((*here, key), getattr(rule, key)))
        if rule.rewrite is not None:
            own.extend(((*here, "rewrite", "set", target), source) for target, source in rule.rewrite.set.items())
        pending = list(own)
        seen: set[str] = set()
        while pending:
            path, source = pending.pop(0)
            yield path, source
            tree = _parse(source)
            for ref in references(tree) if tree is not None else ():
                if ref.root == "variables" and ref.name in self.variables and ref.name not in seen:
                    seen.add(ref.name)
                    pending.append(self.variables[ref.name])


def _shadowed(rules: Sequence[_Rule], catalog: Catalog | None) -> list[Diagnostic]:
    """Rules that can never decide a call: an enforced rule without ``when`` whose verdict is stricter
    covers every tool they cover (at their stage), and the strictest verdict always wins.

    Without a catalog only a rule for every tool (no ``tools:``) is known to cover another.
    """
    def covered(rule: _Rule) -> frozenset[str] | None:  # None: every tool, or unknown without a catalog
        if rule.tools is None or catalog is None:
            return None
        return frozenset(t.name for t in catalog.matching(rule.tools))

    def covers(wide: _Rule, narrow: _Rule) -> bool:
        if wide.tools is None:
            return True
        theirs, mine = covered(wide), covered(narrow)
        return theirs is not None and mine is not None and mine <= theirs

    found: list[Diagnostic] = []
    strict = [r for r in rules if r.enforced and r.unconditional and r.verdict is not None]
    for rule in rules:
        if not rule.enforced or rule.verdict is None or covered(rule) == frozenset():
            continue  # (a rule that matches no tool is unknown-tool's to report)
        for other in strict:
            if (other is rule or other.stage is not rule.stage or other.verdict is None
                    or STRICTNESS[other.verdict] <= STRICTNESS[rule.verdict] or not covers(other, rule)):
                continue
            if rule.can_fail and STRICTNESS[other.verdict] < STRICTNESS[Verdict.REJECT]:
                continue  # its failure would reject, which is stricter: it can still decide
            whom = "every tool" if other.tools is None else "each of its tools"
            found.append(Diagnostic(
                "rule-shadowed", f"this rule can never decide a call: rule {other.id} ({other.file}:{other.line})"
                f" gives every call to {whom} the stricter verdict {other.verdict!s}, and the strictest verdict"
                " wins", rule.file, rule.line, rule.column, rule.id,
                f"narrow {other.id} with 'when' or 'tools', or remove this rule", Severity.WARNING))
            break
    return found


def _can_fail(rule: RuleSpec, default: OnError) -> bool:
    expressions = (rule.when, rule.messageExpression, rule.resultExpression, rule.labelsExpression)
    return (rule.on_error or default) is OnError.DENY and any(e is not None for e in expressions)


def _valid(model: type[RuleSpec] | type[VariableSpec] | type[TallySpec], items: Any) -> list[tuple[int, Any]]:
    """(index, spec) for each entry that validates; the rest are the loader's to report."""
    out: list[tuple[int, Any]] = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        try:
            out.append((index, model.model_validate(item)))
        except ValidationError:
            continue
    return out


# --- input schemas ---

def _argument_names(schema: Mapping[str, Any]) -> tuple[set[str], bool] | None:
    """(the argument names the schema lists, whether it forbids others); None when it accepts any."""
    names: set[str] = set()
    closed = True
    parts = list(_object_parts(schema, schema, 0))
    if not parts:
        return None
    for part in parts:
        props = part.get("properties")
        if not isinstance(props, dict) or part.get("patternProperties"):
            return None
        names.update(str(k) for k in props)
        extra = _extra(part)
        if extra is None:
            closed = False
        elif extra is not False:
            return None
    return names, closed or _extra(schema) is False  # the whole schema closed: so is each part


def _extra(schema: Mapping[str, Any]) -> Any:
    """What the schema says of arguments it does not list (None: nothing, so they are allowed)."""
    return schema.get("additionalProperties", schema.get("unevaluatedProperties"))


def _object_parts(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> Iterator[Mapping[str, Any]]:
    """The schema and the subschemas it is made of (local ``$ref``, ``allOf``/``anyOf``/``oneOf``)."""
    if depth > 8:  # a $ref cycle: stop, the schema is then taken as accepting anything
        return
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve(root, ref)
        if target is not None:
            yield from _object_parts(target, root, depth + 1)
    combined = [s for key in ("allOf", "anyOf", "oneOf") for s in schema.get(key) or [] if isinstance(s, dict)]
    for sub in combined:
        yield from _object_parts(sub, root, depth + 1)
    if "properties" in schema or not (combined or isinstance(ref, str)):
        yield schema


def _resolve(root: Mapping[str, Any], ref: str) -> Mapping[str, Any] | None:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in (p for p in ref[1:].split("/") if p):
        key = part.replace("~1", "/").replace("~0", "~")
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _parse(source: str) -> Tree[Any] | None:
    """The front end's tree of ``source`` (shared with loading); None when it does not parse."""
    try:
        return parse(source)
    except CelCompileError:
        return None  # loading reports the syntax error
