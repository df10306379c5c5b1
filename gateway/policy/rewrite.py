"""Changes a rewrite rule makes to a JSON value: set a path, remove a path, redact text.

Paths are dotted (``payment.amount``, ``items.0.name``); a segment of digits indexes a list.
Every function returns a new value and never changes its input, so a decision can keep both the
original and the rewritten arguments.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gateway.core.redaction import Redaction

__all__ = ["parse_path", "redact", "remove_path", "set_path"]

PathParts = tuple[str | int, ...]


def parse_path(path: str) -> PathParts:
    """``"a.0.b"`` → ``("a", 0, "b")``; raises ValueError for an empty segment."""
    parts: list[str | int] = []
    for segment in path.split("."):
        if not segment:
            raise ValueError(f"path {path!r} has an empty segment")
        parts.append(int(segment) if segment.isdigit() else segment)
    return tuple(parts)


def set_path(value: Any, path: PathParts, new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path``; missing maps on the way are created.

    Only the containers along the path are copied; the rest is shared with the input, which is
    never changed.
    """
    root: Any = _copy(value) if isinstance(value, (dict, list)) else {}
    node = root
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                raise ValueError(f"index {part} is past the end of a list of {len(node)}")
            if last:
                node[part] = new
            else:
                node[part] = node = _copy(node[part])
            continue
        if not isinstance(node, dict):
            raise ValueError(f"cannot set {'.'.join(map(str, path))!r}: {part!r} is not inside a map")
        key = str(part)
        if last:
            node[key] = new
        else:
            child = node.get(key)
            node[key] = node = _copy(child) if isinstance(child, (dict, list)) else {}
    return root


def remove_path(value: Any, path: PathParts) -> Any:
    """A copy of ``value`` without ``path``; a path that is not there is not an error."""
    root = _copy(value)
    node: Any = root
    for part in path[:-1]:
        if isinstance(node, dict) and isinstance(node.get(str(part)), (dict, list)):
            node[str(part)] = node = _copy(node[str(part)])
        elif isinstance(node, list) and isinstance(part, int) and part < len(node) \
                and isinstance(node[part], (dict, list)):
            node[part] = node = _copy(node[part])
        else:
            return value
    last = path[-1]
    if isinstance(node, dict):
        node.pop(str(last), None)
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        del node[last]
    return root


def _copy(value: Any) -> Any:
    """A shallow copy of a container (its children are copied only when a path goes through them)."""
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value


def redact(value: Any, patterns: Sequence[re.Pattern[str]]) -> Any:
    """``value`` with every match of ``patterns`` in its strings replaced, however deep (``core/redaction.py``)."""
    return Redaction((), patterns)(value)
