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

from gateway.core.diagnostics import Diagnostic
from gateway.core.limits import MAX_YAML_DEPTH, MAX_YAML_NODES

__all__ = ["Located", "Position", "YamlDocument", "load_yaml"]

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Position:
    """A 1-based line and column, and the node's span in the file text (for offsets inside it)."""

    line: int
    column: int
    style: str | None = None  # None = plain, "'" / '"' = quoted, "|" / ">" = block
    start: int = 0  # character offsets of the node in the file text
    end: int = 0


@dataclass(slots=True)
class YamlDocument:
    """The plain data of a YAML file plus a path → position table."""

    file: str
    data: Any
    positions: dict[Path, Position] = field(default_factory=dict)
    key_positions: dict[Path, Position] = field(default_factory=dict)

    text: str = ""

    def locate(self, path: Path, line: int, column: int) -> Position:
        """Where (line, column) *inside* the scalar at ``path`` is in the file.

        YAML may fold lines, strip indentation and decode escapes, so a column in the value is
        not a column in the file; the scalar's raw text is walked to find the real spot.
        """
        node = self.position(path)
        raw = self.text[node.start:node.end]
        index = _value_offsets(raw, node.style)
        value_lines = _decoded_lengths(index, raw, node.style)
        wanted = sum(n + 1 for n in value_lines[: line - 1]) + column - 1
        if not index:
            return node
        raw_at = node.start + index[min(max(wanted, 0), len(index) - 1)]
        before = self.text[:raw_at]
        return Position(before.count("\n") + 1, raw_at - (before.rfind("\n") + 1) + 1)

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
    return Position(node.start_mark.line + 1, node.start_mark.column + 1, style or None,
                    node.start_mark.index, node.end_mark.index)


_ESCAPE_LENGTH = {"x": 4, "u": 6, "U": 10}


def _value_offsets(raw: str, style: str | None) -> list[int]:
    """For each character of the scalar's value, its offset in ``raw`` (the scalar's file text).

    Line breaks fold to one character that points at the start of the next line's content.
    """
    out: list[int] = []
    i, n = 0, len(raw)
    indent = None
    if style in ("|", ">"):
        i = raw.find("\n") + 1 if "\n" in raw else n  # skip the header line
    elif style in ("'", '"'):
        i, n = 1, n - 1  # inside the quotes
    at_line_start = style in ("|", ">")
    while i < n:
        ch = raw[i]
        if at_line_start:
            j = i
            while j < n and raw[j] == " ":
                j += 1
            if style in ("|", ">"):
                indent = (j - i) if indent is None and j < n and raw[j] != "\n" else indent
                i = i + min(indent or 0, j - i)
            else:
                i = j
            at_line_start = False
            continue
        if ch == "\n":
            while out and style not in ("|", ">") and raw[out[-1]] in " \t":
                out.pop()  # trailing spaces before a fold are not part of the value
            out.append(i)
            i += 1
            at_line_start = True
            continue
        if style == "'" and raw.startswith("''", i):
            out.append(i)
            i += 2
            continue
        if style == '"' and ch == "\\" and i + 1 < n:
            if raw[i + 1] == "\n":  # an escaped line break joins the lines
                i += 2
                at_line_start = True
                continue
            out.append(i)
            i += _ESCAPE_LENGTH.get(raw[i + 1], 2)
            continue
        out.append(i)
        i += 1
    return out


def _decoded_lengths(index: list[int], raw: str, style: str | None) -> list[int]:
    """Lengths of the value's lines: only block scalars keep their line breaks as newlines."""
    if style != "|":
        return [len(index)]
    lengths, current = [], 0
    for offset in index:
        if raw[offset] == "\n":
            lengths.append(current)
            current = 0
        else:
            current += 1
    lengths.append(current)
    return lengths


class _TooBig(Exception):
    """The document expands past MAX_YAML_NODES, nests past MAX_YAML_DEPTH, or an alias contains itself."""


def _construct(
    doc: YamlDocument, node: yaml.Node, path: Path, errors: list[Diagnostic], scalars: SafeConstructor,
    budget: list[int] | None = None, active: frozenset[int] = frozenset(),
) -> Any:
    budget = budget if budget is not None else [MAX_YAML_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig(f"the document expands to more than {MAX_YAML_NODES} values (aliases?)")
    if len(path) > MAX_YAML_DEPTH:
        raise _TooBig(f"values are nested more than {MAX_YAML_DEPTH} levels deep")
    if id(node) in active:
        raise _TooBig("an alias refers to a value that contains it")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        active = active | {id(node)}
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
            out[key] = _construct(doc, value_node, child, errors, scalars, budget, active)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(doc, item, (*path, i), errors, scalars, budget, active)
                for i, item in enumerate(node.value)]
    return scalars.construct_object(node, deep=True)


def load_yaml(text: str, file: str) -> tuple[YamlDocument | None, list[Diagnostic]]:
    """Parse one YAML document; on a syntax error return the error with its position, never raise."""
    errors: list[Diagnostic] = []
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        return None, [Diagnostic("yaml-too-deep", "the YAML is nested too deeply to read", file,
                                 hint=f"policy files need far fewer than {MAX_YAML_DEPTH} levels")]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        return None, [Diagnostic("yaml-syntax", f"YAML syntax error: {problem}", file, line, col,
                                 hint="check indentation and quoting around this spot")]
    except yaml.YAMLError as exc:
        return None, [Diagnostic("yaml-syntax", f"YAML error: {exc}", file)]
    doc = YamlDocument(file, None, text=text)
    if node is None:
        return doc, errors
    try:
        doc.data = _construct(doc, node, (), errors, SafeConstructor())
    except _TooBig as exc:
        return None, [Diagnostic("yaml-too-large", str(exc), file,
                                 hint="write the values out instead of nesting aliases")]
    except yaml.YAMLError as exc:  # e.g. a bad timestamp or an unknown tag
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return None, [Diagnostic("yaml-syntax", f"YAML error: {exc}", file, line, col)]
    return doc, errors
