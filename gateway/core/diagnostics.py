"""Positioned messages about policy, config and test files: ``FILE:LINE:COL: error[CODE]: ...``.

In a terminal a diagnostic is followed by the offending line with a caret under the column, as
compilers print them (``render``); the one-line form (``Diagnostic.format``) is what logs carry.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from gateway.core.limits import MAX_POLICY_FILE_BYTES, MAX_SNIPPET_CHARS

__all__ = ["Diagnostic", "Severity", "SourceLines", "render"]


class Severity(StrEnum):
    """How bad a diagnostic is: errors stop a load, warnings do not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a file, with where it is, which rule, and what to do about it."""

    code: str
    message: str
    file: str
    line: int = 1
    column: int = 1
    rule: str | None = None
    hint: str | None = None
    severity: Severity = Severity.ERROR

    def format(self) -> str:
        """Render as one line a compiler user would recognise."""
        text = f"{self.file}:{self.line}:{self.column}: {self.severity}[{self.code}]: {self.message}"
        if self.rule:
            # test-suite diagnostics name a case ("case NAME"), a tally's its tally ("tally POLICY/ID"), not a rule id
            text += f" ({self.rule})" if self.rule.startswith(("case ", "tally ")) else f" (rule {self.rule})"
        if self.hint:
            text += f"; hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


class SourceLines:
    """The lines of the files diagnostics point into, each file read once.

    A file that is missing, unreadable, too large or not UTF-8 simply has no lines: a snippet is a
    help, never a reason for a second error.
    """

    def __init__(self, texts: Mapping[str, str] | None = None) -> None:
        self._lines: dict[str, list[str] | None] = {f: t.splitlines() for f, t in (texts or {}).items()}

    def line(self, file: str, number: int) -> str | None:
        """Line ``number`` (1-based) of ``file``, or None."""
        if file not in self._lines:
            self._lines[file] = _read_lines(file)
        lines = self._lines[file]
        if lines is None or not 1 <= number <= len(lines):
            return None
        return lines[number - 1]


def _read_lines(file: str) -> list[str] | None:
    try:
        path = Path(file)
        if not path.is_file() or path.stat().st_size > MAX_POLICY_FILE_BYTES:
            return None
        return path.read_bytes().decode("utf-8").splitlines()
    except (OSError, ValueError):
        return None


def snippet(d: Diagnostic, sources: SourceLines) -> tuple[str, str] | None:
    """(the offending line as shown, the caret line under it), or None when the line is unknown."""
    text = sources.line(d.file, d.line)
    if text is None:
        return None
    # Control characters (a terminal escape in a hostile file) are shown as U+FFFD, one for one,
    # so the caret stays under the right column and nothing in the file can drive the terminal.
    shown = "".join(c if c == "\t" or unicodedata.category(c)[0] != "C" else "\ufffd" for c in text)
    column = min(max(d.column, 1), len(shown) + 1)
    start = max(0, min(column - 1 - MAX_SNIPPET_CHARS // 2, len(shown) - MAX_SNIPPET_CHARS))
    window = shown[start:start + MAX_SNIPPET_CHARS]
    pad = "".join("\t" if c == "\t" else " " for c in window[: column - 1 - start])
    return window.rstrip(), pad + "^"


def render(d: Diagnostic, sources: SourceLines) -> str:
    """The diagnostic's line, then (when the file has that line) the line and a caret under the column."""
    head = d.format()
    shown = snippet(d, sources)
    if shown is None:
        return head
    text, caret = shown
    gutter = " " * len(str(d.line))
    return f"{head}\n  {d.line} | {text}\n  {gutter} | {caret}"
