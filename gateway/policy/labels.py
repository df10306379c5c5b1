"""What a label may be, checked in one place: static ``labels:`` at load, a ``labelsExpression``'s value per call.

A label names a kind of data (``untrusted``, ``secret``, ``pii:email``), never the data itself: short, from a
small alphabet, a few per rule (``gateway/core/limits/flow.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gateway.core.errors import CelEvaluationError
from gateway.core.limits import MAX_LABEL_CHARS, MAX_LABELS_PER_RULE

__all__ = ["LABEL_PATTERN", "checked_labels", "label_problem", "labels_problem"]

LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_LABEL = re.compile(LABEL_PATTERN)


def label_problem(label: Any) -> str | None:
    """Why ``label`` is not a valid label, or None."""
    if not isinstance(label, str):
        return f"a label must be a string, not {type(label).__name__}"
    if len(label) > MAX_LABEL_CHARS:
        return f"label {label[:MAX_LABEL_CHARS]!r}... is longer than {MAX_LABEL_CHARS} characters"
    if not _LABEL.match(label):
        return f"label {label!r} must match {LABEL_PATTERN}"
    return None


def labels_problem(labels: Sequence[Any]) -> str | None:
    """Why a rule may not add ``labels`` (too many different ones), or None; each label is checked on its own."""
    count = len(set(x for x in labels if isinstance(x, str)))
    if count > MAX_LABELS_PER_RULE:
        return f"a rule may add at most {MAX_LABELS_PER_RULE} labels, this one gives {count}"
    return None


def checked_labels(value: Any) -> tuple[str, ...]:
    """A ``labelsExpression``'s value as the labels it adds (each once, in order); ``CelEvaluationError`` if invalid."""
    if type(value) is not list:
        raise CelEvaluationError(f"labelsExpression must give a list of strings, got {type(value).__name__}")
    for label in value:
        problem = label_problem(label)
        if problem is not None:
            raise CelEvaluationError(f"labelsExpression gave an invalid label: {problem}")
    problem = labels_problem(value)
    if problem is not None:
        raise CelEvaluationError(problem)
    return tuple(dict.fromkeys(value))
