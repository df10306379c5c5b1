"""Caret snippets under diagnostics: the offending line, a caret under the column, and nothing a
hostile file could use to drive the terminal."""

from __future__ import annotations

from pathlib import Path

from gateway.core.diagnostics import Diagnostic, SourceLines, render
from gateway.core.limits import MAX_SNIPPET_CHARS


def test_the_line_and_a_caret_under_the_column(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text("policy: p\nrules:\n  - id: r\n    when: args.brnach == 'main'\n")
    d = Diagnostic("unknown-argument", "no argument 'brnach'", str(path), 4, 16, "p/r", "did you mean args.branch?")
    assert render(d, SourceLines()).splitlines() == [
        d.format(),
        "  4 |     when: args.brnach == 'main'",
        "    |                ^",
    ]


def test_a_tab_before_the_column_stays_a_tab_so_the_caret_lines_up(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text("#\tx = y\n")
    assert render(Diagnostic("c", "m", str(path), 1, 4), SourceLines()).splitlines()[1:] == [
        "  1 | #\tx = y", "    |  \t ^"]


def test_control_characters_are_shown_as_replacement_characters_one_for_one(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text("a: '\x1b]0;pwned\x07\x1b[2J' # x\n")
    text = render(Diagnostic("c", "m", str(path), 1, 20), SourceLines())
    assert "\x1b" not in text and "\x07" not in text
    line, caret = text.splitlines()[1:]
    assert line == "  1 | a: '\ufffd]0;pwned\ufffd\ufffd[2J' # x"
    assert caret == "    | " + " " * 19 + "^"


def test_a_long_line_is_cut_to_a_window_around_the_column(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text("x: " + "a" * 5000 + "!" + "b" * 5000 + "\n")
    line, caret = render(Diagnostic("c", "m", str(path), 1, 5004), SourceLines()).splitlines()[1:]
    shown = line.removeprefix("  1 | ")
    assert len(shown) == MAX_SNIPPET_CHARS
    assert shown[caret.index("^") - len("    | ")] == "!"


def test_no_snippet_when_the_file_or_line_cannot_be_read(tmp_path: Path):
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    for d in (Diagnostic("c", "m", str(tmp_path / "missing.yaml"), 1, 1),
              Diagnostic("c", "m", str(tmp_path), 1, 1),
              Diagnostic("c", "m", str(tmp_path / "binary.yaml"), 1, 1)):
        assert render(d, SourceLines()) == d.format()
    path = tmp_path / "short.yaml"
    path.write_text("one line\n")
    beyond = Diagnostic("c", "m", str(path), 7, 1)
    assert render(beyond, SourceLines()) == beyond.format()
