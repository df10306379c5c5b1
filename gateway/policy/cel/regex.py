"""CEL's ``matches()`` over cached RE2 patterns, for both engines.

cel-expr-python compiles a ``matches()`` pattern on every evaluation (30-250 µs; it has no option
to precompile), so the C++ engine compiles an expression whose ``matches`` calls are renamed to
``HIDDEN``, a gateway function with the same signatures backed by ``matches`` below. The name has
the same length as ``matches``, so every position in a compile error stays where the author wrote
it; a message naming it is given back the name ``matches``. The pure-Python engine calls
``matches`` directly: both run the same RE2 search (unanchored, RE2's default options).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2  # google-re2, the engine behind CEL's matches() everywhere

__all__ = ["HIDDEN", "cached_regex", "matches", "rename_matches", "restore_name"]

# Same length as "matches"; an expression that names it itself is refused (``rename_matches``).
HIDDEN = "__re2__"

# A CEL string or bytes literal (raw ones have no escapes), an identifier, or any other character.
_TOKENS = re.compile(r"""
    (?P<raw>(?:[rR][bB]?|[bB][rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*"))
  | (?P<str>[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<id>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
_CALL = re.compile(r"\s*\(")


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


def rename_matches(source: str) -> str | None:
    """``source`` with every ``matches(`` call named ``HIDDEN``; None when it names ``HIDDEN`` itself.

    Strings are skipped, so a pattern or message containing "matches(" is left alone; a field
    named ``matches`` is not a call and is left alone too.
    """
    parts = []
    for token in _TOKENS.finditer(source):
        word = token.group("id")
        if word == HIDDEN:
            return None
        if word == "matches" and _CALL.match(source, token.end()):
            parts.append(HIDDEN)
        else:
            parts.append(token.group())
    return "".join(parts)


def restore_name(message: str) -> str:
    """A compiler or evaluation message with ``HIDDEN`` named ``matches`` again."""
    return message.replace(HIDDEN, "matches")
