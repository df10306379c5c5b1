"""CEL's ``matches()`` over cached RE2 patterns, for both engines.

cel-expr-python compiles a ``matches()`` pattern on every evaluation (30-250 µs; it has no option
to precompile), and it will not let a second ``matches(string, string)`` be registered. So the C++
engine checks an expression as written, against the standard ``matches``, and then binds each of
its checked tree's ``matches`` calls to ``HIDDEN`` (``checked.rename_calls``), a function of the
same signatures backed by ``matches`` below, declared only where programs are planned: an author
cannot call it, and a run-time message naming it is given back the name ``matches``. The
pure-Python engine calls ``matches`` directly: both run the same RE2 search (unanchored, RE2's
default options).
"""

from __future__ import annotations

import functools
from typing import Any

import re2  # google-re2, the engine behind CEL's matches() everywhere

__all__ = ["HIDDEN", "cached_regex", "matches", "restore_name"]

# Not declared where expressions are checked, so an expression naming it is an undeclared reference.
HIDDEN = "__re2__"


@functools.lru_cache(maxsize=256)
def cached_regex(pattern: str) -> Any:
    """The compiled RE2 pattern; an invalid one is an evaluation error (``ValueError``)."""
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"invalid regular expression: {reason}") from None


def matches(value: str, pattern: str) -> bool:
    """CEL's ``matches``: whether RE2 finds ``pattern`` anywhere in ``value``."""
    return cached_regex(pattern).search(value) is not None


def restore_name(message: str) -> str:
    """An evaluation message with ``HIDDEN`` named ``matches`` again."""
    return message.replace(HIDDEN, "matches")
