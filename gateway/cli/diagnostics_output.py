"""How the policy and config commands print diagnostics: JSON with the source line, or text with a caret."""

from __future__ import annotations

import json
import sys
from typing import Any

from gateway.core.diagnostics import Diagnostic, Severity, SourceLines, render

__all__ = ["print_diagnostics"]


def print_diagnostics(diagnostics: list[Diagnostic], as_json: bool, extra: dict[str, Any]) -> None:
    """Diagnostics as JSON (each with its source line as ``snippet`` when known), or as text with a
    caret under the offending column: errors to stderr, warnings to stdout."""
    sources = SourceLines()
    if as_json:
        print(json.dumps({**extra, "diagnostics": [_with_snippet(d, sources) for d in diagnostics]}, indent=2))
        return
    for d in diagnostics:
        print(render(d, sources), file=sys.stderr if d.severity is Severity.ERROR else sys.stdout)


def _with_snippet(d: Diagnostic, sources: SourceLines) -> dict[str, Any]:
    line = sources.line(d.file, d.line)
    return d.to_dict() if line is None else {**d.to_dict(), "snippet": line}
