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
from gateway.limits import MAX_VALUE_DEPTH, REDACTED

__all__ = ["AuditLog", "Redactor"]


class Redactor:
    """Replaces secret-looking values and remembers where."""

    def __init__(self, keys: Sequence[str], patterns: Sequence[str]) -> None:
        self._keys = {k.lower() for k in keys}
        self._patterns = [re.compile(p) for p in patterns]

    def apply(self, value: Any, pointer: str = "", found: list[str] | None = None,
              depth: int = 0) -> tuple[Any, list[str]]:
        """A redacted copy of ``value`` and the JSON Pointers that were redacted."""
        found = [] if found is None else found
        if isinstance(value, dict) and depth < MAX_VALUE_DEPTH:
            out = {}
            for key, item in value.items():
                here = f"{pointer}/{_escape(str(key))}"
                if str(key).lower() in self._keys:
                    out[key] = REDACTED
                    found.append(here)
                else:
                    out[key] = self.apply(item, here, found, depth + 1)[0]
            return out, found
        if isinstance(value, list) and depth < MAX_VALUE_DEPTH:
            return [self.apply(v, f"{pointer}/{i}", found, depth + 1)[0] for i, v in enumerate(value)], found
        if isinstance(value, str) and self._patterns:
            text = value
            for pattern in self._patterns:
                text = pattern.sub(REDACTED, text)
            if text != value:
                found.append(pointer or "/")
            return text, found
        return value, found


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
