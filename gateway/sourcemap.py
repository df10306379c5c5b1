"""YAML loading that remembers where every value came from.

PyYAML's composer gives each node a start mark; we keep those marks in a table keyed by the
JSON-style path of the value (``("rules", 0, "when")``), so that a schema error or a CEL error
deep inside an expression can be reported as ``file:line:col``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from gateway.diagnostics import Diagnostic

__all__ = ["Located", "Position", "YamlDocument", "load_yaml"]

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Position:
    """A 1-based line and column, and how the scalar there was written (for offsets inside it)."""

    line: int
    column: int
    style: str | None = None  # None = plain, "'" / '"' = quoted, "|" / ">" = block

    def offset(self, line: int, column: int) -> Position:
        """Where (line, column) *inside* this scalar's text falls in the file."""
        if self.style in ("|", ">"):
            # Block scalars start on the next line; their indent is not knowable from the mark
            # alone, so we point at the expression's line and keep the in-expression column.
            return Position(self.line + line, column)
        if line > 1:
            return Position(self.line + line - 1, column)
        quote = 1 if self.style in ("'", '"') else 0
        return Position(self.line, self.column + quote + column - 1)


@dataclass(slots=True)
class YamlDocument:
    """The plain data of a YAML file plus a path → position table."""

    file: str
    data: Any
    positions: dict[Path, Position] = field(default_factory=dict)
    key_positions: dict[Path, Position] = field(default_factory=dict)

    def position(self, path: Path, *, key: bool = False) -> Position:
        """The position of the value at ``path`` (or of its key), falling back to the nearest parent."""
        table = self.key_positions if key else self.positions
        probe = tuple(path)
        while probe:
            if probe in table:
                return table[probe]
            if probe in self.positions:
                return self.positions[probe]
            probe = probe[:-1]
        return self.positions.get((), Position(1, 1))


@dataclass(frozen=True, slots=True)
class Located:
    """A value with the position it was read from."""

    value: Any
    position: Position


def _mark(node: yaml.Node) -> Position:
    style = getattr(node, "style", None)
    return Position(node.start_mark.line + 1, node.start_mark.column + 1, style or None)


def _construct(
    doc: YamlDocument, node: yaml.Node, path: Path, errors: list[Diagnostic], scalars: SafeConstructor
) -> Any:
    doc.positions[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = scalars.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                key = str(key)
            child: Path = (*path, key)
            if key in out:
                mark = _mark(key_node)
                errors.append(Diagnostic(
                    "duplicate-key", f"duplicate key {key!r}", doc.file, mark.line, mark.column,
                    hint="YAML keeps only the last value; remove one of them",
                ))
            doc.key_positions[child] = _mark(key_node)
            out[key] = _construct(doc, value_node, child, errors, scalars)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(doc, item, (*path, i), errors, scalars) for i, item in enumerate(node.value)]
    return scalars.construct_object(node, deep=True)


def load_yaml(text: str, file: str) -> tuple[YamlDocument | None, list[Diagnostic]]:
    """Parse one YAML document; on a syntax error return the error with its position, never raise."""
    errors: list[Diagnostic] = []
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        return None, [Diagnostic("yaml-syntax", f"YAML syntax error: {problem}", file, line, col,
                                 hint="check indentation and quoting around this spot")]
    except yaml.YAMLError as exc:
        return None, [Diagnostic("yaml-syntax", f"YAML error: {exc}", file)]
    doc = YamlDocument(file, None)
    if node is None:
        return doc, errors
    try:
        doc.data = _construct(doc, node, (), errors, SafeConstructor())
    except yaml.YAMLError as exc:  # e.g. a bad timestamp or an unknown tag
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return None, [Diagnostic("yaml-syntax", f"YAML error: {exc}", file, line, col)]
    return doc, errors
