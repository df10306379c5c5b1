"""Positioned messages about policy, config and test files: ``FILE:LINE:COL: error[CODE]: ...``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Diagnostic", "Severity"]


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
            # test-suite diagnostics name a case ("case NAME") rather than a rule id
            text += f" ({self.rule})" if self.rule.startswith("case ") else f" (rule {self.rule})"
        if self.hint:
            text += f"; hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)
