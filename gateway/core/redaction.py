"""Redaction of JSON values: the one walk the audit log, approvals and policies' ``rewrite.redact`` share.

Two tests decide what is replaced with ``REDACTED`` (``core/limits.py``): a map key named like a
secret (compared without case, a key that is not a string by its text) replaces the whole value under
it, and each match of a pattern in a string is replaced in place. ``apply`` also gives the JSON
Pointers of what it replaced, in document order (the audit event's ``redacted``, OPA's habit).

The walk keeps its own stack instead of recursing, so there is no depth past which values are left as
they are. It never changes its input. When nothing would be replaced the input itself comes back, not
a copy: most values carry no secret, and every caller serialises or compares the result at once, so
the copy (the costly part) is made only when it differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.core.limits import REDACTED

__all__ = ["Redaction"]

# A path in the walk: (parent path, this segment); the root's parent is None.
_Path = tuple[Any, str]

# Stands in, on the walk's stack, for a value whose key names a secret.
_SECRET_KEY = object()


class Redaction:
    """Replaces values under secret-named keys and pattern matches in strings, and remembers where."""

    def __init__(self, keys: Iterable[str] = (), patterns: Sequence[re.Pattern[str]] = ()) -> None:
        self._keys = {k.lower() for k in keys}
        self._patterns = list(patterns)

    def apply(self, value: Any, pointer: str = "", found: list[str] | None = None) -> tuple[Any, list[str]]:
        """A redacted copy of ``value`` (``value`` itself when nothing is redacted) and the JSON Pointers
        redacted, each below ``pointer``, appended to ``found``."""
        found = [] if found is None else found
        if not self.finds(value):
            return value, found
        keys, patterns = self._keys, self._patterns
        root: list[Any] = [None]
        # (value, its path, the container the copy goes into, the slot there). Paths are linked
        # (parent, segment) pairs, rendered only for what is redacted: deep values stay linear.
        stack: list[tuple[Any, _Path, Any, Any]] = [(value, (None, pointer), root, 0)]
        while stack:
            item, path, parent, slot = stack.pop()
            if item is _SECRET_KEY:
                parent[slot] = REDACTED
                found.append(_render(path))
            elif isinstance(item, dict):
                out: dict[Any, Any] = dict.fromkeys(item)  # the copy keeps the original's key order
                parent[slot] = out
                stack.extend(reversed([
                    (_SECRET_KEY if str(key).lower() in keys else child, (path, "/" + _escape(str(key))), out, key)
                    for key, child in item.items()]))
            elif isinstance(item, list):
                copy: list[Any] = [None] * len(item)
                parent[slot] = copy
                stack.extend(reversed([(child, (path, f"/{i}"), copy, i) for i, child in enumerate(item)]))
            elif isinstance(item, str) and patterns:
                text = item
                for pattern in patterns:
                    text = pattern.sub(REDACTED, text)
                if text != item:
                    found.append(_render(path) or "/")
                parent[slot] = text
            else:
                parent[slot] = item
        return root[0], found

    def finds(self, value: Any) -> bool:
        """Whether ``apply`` would replace anything in ``value``: the same two tests, with no copy and no paths
        (the fast path: it stops at the first secret)."""
        keys, patterns = self._keys, self._patterns
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key, child in item.items():
                    if str(key).lower() in keys:
                        return True
                    stack.append(child)
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, str) and patterns:
                if any(pattern.search(item) for pattern in patterns):  # no match: sub() changes nothing
                    return True
        return False

    def __call__(self, value: Any) -> Any:
        """Just the redacted copy of ``value`` (for views that do not report what was redacted)."""
        return self.apply(value)[0]


def _render(path: _Path) -> str:
    parts: list[str] = []
    node: _Path | None = path
    while node is not None:
        parts.append(node[1])
        node = node[0]
    return "".join(reversed(parts))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
