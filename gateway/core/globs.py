"""Glob patterns: one matcher for CEL's ``glob()``, rules' ``tools:``, and every name selector of the config.

    *              any run of characters except "/"
    **             any run of characters, "/" included
    ?              one character except "/"
    [abc] [a-z]    one character of the set
    [!abc] [^abc]  one character not in the set, other than "/"

Everything else matches itself, case-sensitively, and the pattern must match the whole text. A
``]`` right after ``[``, ``[!`` or ``[^`` belongs to the set; a ``[`` with no closing ``]`` is a
literal ``[``. Put ``*``, ``?`` or ``[`` in brackets to match it literally: ``[*]``.

Patterns are compiled once (and remembered) to RE2 expressions, which match in linear time, so
a hostile value cannot make a pattern with many stars backtrack for seconds.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2  # google-re2: linear-time matching

__all__ = ["glob_match", "glob_problem", "glob_regex", "is_glob"]

_GLOB_CHARS = frozenset("*?[")


def glob_match(value: str, pattern: str) -> bool:
    """Whether ``pattern`` matches the whole of ``value``; a malformed pattern raises ``ValueError``."""
    return _compiled(pattern).fullmatch(value) is not None


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard (``*``, ``?`` or ``[``) rather than being an exact name."""
    return any(char in _GLOB_CHARS for char in pattern)


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a valid glob, or None; for checks at load time."""
    try:
        _compiled(pattern)
    except ValueError as exc:
        return str(exc)
    return None


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    regex = glob_regex(pattern)
    try:  # Python's parser first: same syntax here, and it reports errors without logging them
        re.compile(regex)
    except re.error as exc:
        raise ValueError(f"invalid glob pattern {pattern!r}: {exc.msg}") from None
    return re2.compile(regex)


def glob_regex(pattern: str) -> str:
    """The regular expression (RE2 and Python ``re`` alike) equivalent to a glob pattern."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                while i < n and pattern[i] == "*":  # "***" is "**"
                    i += 1
                continue
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end, members, negated = _bracket(pattern, i)
            if end < 0:
                out.append(re.escape(char))
            else:
                out.append(f"[^/{members}]" if negated else f"[{members}]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "(?s:" + "".join(out) + ")"


def _bracket(pattern: str, start: int) -> tuple[int, str, bool]:
    """(index of the closing "]", the set's members escaped for a regex class, negated)."""
    i = start + 1
    negated = i < len(pattern) and pattern[i] in "!^"
    if negated:
        i += 1
    first = i
    while i < len(pattern) and (pattern[i] != "]" or i == first):
        i += 1
    if i >= len(pattern):
        return -1, "", False
    body = pattern[first:i]
    members = "".join(_member(c) for c in body)
    return i, members, negated


def _member(char: str) -> str:
    # keep ranges ("a-z"); escape what a regex class would read specially
    return "\\" + char if char in "\\]^[" else char

