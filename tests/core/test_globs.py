"""The one glob matcher (gateway/core/globs.py): what each pattern form matches, what is malformed, and
that a hostile value cannot make a pattern backtrack. CEL's glob() runs through it (tests/policy/cel/)."""

from __future__ import annotations

import re
import time

import pytest

from gateway.core.globs import glob_match, glob_problem, glob_regex, is_glob

CASES = [
    # (value, pattern, matches)
    ("fs_read", "fs_*", True),
    ("fs_", "fs_*", True),
    ("xfs_read", "fs_*", False),  # the whole text, not a part of it
    ("fs_read", "FS_*", False),  # case-sensitive
    ("a/b", "a*", False),  # * stops at "/"
    ("a/b/c", "a/**", True),  # ** does not
    ("a/b/c", "a/***", True),  # *** is **
    ("a/", "a/**", True),
    ("ab", "a?", True),
    ("a/", "a?", False),  # ? is one character other than "/"
    ("a", "a?", False),
    ("b", "[abc]", True),
    ("d", "[abc]", False),
    ("m", "[a-z]", True),
    ("M", "[a-z]", False),
    ("d", "[!abc]", True),
    ("d", "[^abc]", True),
    ("a", "[!abc]", False),
    ("/", "[!abc]", False),  # a negated set never matches "/"
    ("]", "[]]", True),  # "]" right after "[" belongs to the set
    ("]", "[!]]", False),
    ("x", "[!]]", True),
    ("[", "[", True),  # a "[" with no closing "]" is literal
    ("[ab", "[ab", True),
    ("*", "[*]", True),  # brackets make a wildcard literal
    ("x", "[*]", False),
    ("?", "[?]", True),
    ("a.b", "a.b", True),  # everything else matches itself
    ("axb", "a.b", False),
    ("a+b", "a+b", True),
    ("a\\b", "a\\b", True),
    ("^", "[\\^]", True),
    ("line\nbreak", "line*", True),  # * crosses a newline
    ("", "", True),
    ("", "*", True),
    ("é", "?", True),  # one code point
]


@pytest.mark.parametrize(("value", "pattern", "matches"), CASES)
def test_glob_match(value: str, pattern: str, matches: bool) -> None:
    assert glob_match(value, pattern) is matches
    assert (re.fullmatch(glob_regex(pattern), value) is not None) is matches  # RE2 and Python's re agree


@pytest.mark.parametrize("pattern", ["[z-a]", "x[b-a]y"])
def test_a_malformed_pattern_is_refused(pattern: str) -> None:
    problem = glob_problem(pattern)
    assert problem is not None and problem.startswith(f"invalid glob pattern {pattern!r}")
    with pytest.raises(ValueError, match="invalid glob pattern"):
        glob_match("b", pattern)


@pytest.mark.parametrize("pattern", ["fs_*", "**", "[abc]", "[", "plain", ""])
def test_a_valid_pattern_has_no_problem(pattern: str) -> None:
    assert glob_problem(pattern) is None


@pytest.mark.parametrize(("pattern", "wild"), [("fs_*", True), ("a?", True), ("[ab]", True), ("[", True),
                                               ("fs_read", False), ("a.b-c/d", False), ("", False)])
def test_is_glob(pattern: str, wild: bool) -> None:
    assert is_glob(pattern) is wild


def test_a_hostile_value_cannot_make_a_pattern_backtrack() -> None:
    started = time.thread_time()  # CPU time of this thread: other processes cannot inflate it
    assert glob_match("a" * 200_000, "*a*a*a*a*a*a*a*a*b") is False
    assert glob_match("a" * 200_000, "**a**a**a**a**a**a**b") is False
    assert time.thread_time() - started < 5  # linear time; a backtracking matcher takes hours


def test_exports() -> None:
    import gateway.core.globs

    assert gateway.core.globs.__all__ == ["glob_match", "glob_problem", "glob_regex", "is_glob"]
