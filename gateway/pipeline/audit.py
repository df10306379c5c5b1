"""The decision log: one JSON event per call, written before the result goes back.

Redaction happens here, at the edge: keys named like secrets and configured patterns are
replaced, and the JSON Pointers of what was replaced are recorded in the event (OPA's habit).
A write that fails raises ``AuditWriteError`` so the call can fail closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from gateway.errors import AuditWriteError
from gateway.limits import REDACTED

__all__ = ["AuditLog", "Redactor"]


class Redactor:
    """Replaces secret-looking values and remembers where.

    The walk keeps its own stack instead of recursing, so a secret is found however deep it is
    nested: there is no depth past which values are left as they are.
    """

    def __init__(self, keys: Sequence[str], patterns: Sequence[str]) -> None:
        self._keys = {k.lower() for k in keys}
        self._patterns = [re.compile(p) for p in patterns]

    def apply(self, value: Any, pointer: str = "", found: list[str] | None = None) -> tuple[Any, list[str]]:
        """A redacted copy of ``value`` and the JSON Pointers that were redacted (in document order)."""
        found = [] if found is None else found
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
                    (_SECRET_KEY if str(key).lower() in self._keys else child, (path, "/" + _escape(str(key))),
                     out, key) for key, child in item.items()]))
            elif isinstance(item, list):
                copy: list[Any] = [None] * len(item)
                parent[slot] = copy
                stack.extend(reversed([(child, (path, f"/{i}"), copy, i) for i, child in enumerate(item)]))
            elif isinstance(item, str) and self._patterns:
                text = item
                for pattern in self._patterns:
                    text = pattern.sub(REDACTED, text)
                if text != item:
                    found.append(_render(path) or "/")
                parent[slot] = text
            else:
                parent[slot] = item
        return root[0], found

    def __call__(self, value: Any) -> Any:
        """Just the redacted copy of ``value`` (for views that do not report what was redacted)."""
        return self.apply(value)[0]


# A path in the walk: (parent path, this segment); the root's parent is None.
_Path = tuple[Any, str]

# Stands in, on the walk's stack, for a value whose key names a secret.
_SECRET_KEY = object()


def _render(path: _Path) -> str:
    parts: list[str] = []
    node: _Path | None = path
    while node is not None:
        parts.append(node[1])
        node = node[0]
    return "".join(reversed(parts))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class AuditLog:
    """Appends JSON lines to a file and/or stdout."""

    def __init__(self, path: Path | None, stdout: bool = False, redactor: Redactor | None = None,
                 stream: TextIO | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor((), ())
        self._stdout = stream if stream is not None else (sys.stdout if stdout else None)
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: dict[str, Any]) -> None:
        """Write one event; raise ``AuditWriteError`` if it cannot be written."""
        line = json.dumps(event, ensure_ascii=False, default=str, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                if self.path is not None:
                    if self._file is None or self._file.closed:
                        self._file = self.path.open("a", encoding="utf-8")
                    self._file.write(line)
                    self._file.flush()
                if self._stdout is not None:
                    self._stdout.write(line)
                    self._stdout.flush()
            except (OSError, ValueError) as exc:
                self._discard()
                raise AuditWriteError(f"audit log write failed: {exc}") from exc

    def ensure_writable(self) -> None:
        """Before a tool runs: the log file is open and is still the file at ``path``.

        A log that cannot take the call's event must stop the call before it has side effects.
        """
        if self.path is None:
            return
        with self._lock:
            try:
                if self._file is None or self._file.closed or \
                        os.fstat(self._file.fileno()).st_ino != os.stat(self.path).st_ino:
                    self._discard()
                    self._file = self.path.open("a", encoding="utf-8")
            except (OSError, ValueError) as exc:
                self._discard()
                raise AuditWriteError(f"audit log is not writable: {exc}") from exc

    def _discard(self) -> None:
        """Close a file that failed mid-write; the next write reopens it.

        Its unflushed bytes describe a call that is being refused, so they are dropped with it
        (and a file left to the garbage collector would try to flush them again, and warn).
        """
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError, ValueError):
                file.close()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
