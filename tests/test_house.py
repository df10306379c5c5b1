"""The house rules of docs/architecture.md that no linter checks for us.

- No module of ``gateway/`` is over 400 lines.
- Private names of ``mcp``, ``httpx2``, ``uvicorn`` and ``starlette`` are imported only in a module named
  ``_sdk.py`` (each pinned by its own contract test), and no module reads a private attribute of an
  object other than its own (``self``/``cls``) outside those seams: an SDK upgrade breaks one file.

Each rule is checked on the source, and each check is itself tested on a snippet that breaks it, so a
check that can no longer fail is caught too.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "gateway"
MAX_LINES = 400
LIBRARIES = {"mcp", "httpx2", "uvicorn", "starlette"}
# Public API of the standard library that happens to start with an underscore.
STDLIB_PUBLIC = {"_replace", "_asdict", "_fields", "_field_defaults", "_make", "_exit", "_current_frames"}


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def private_uses(source: str) -> list[str]:
    """Every private import from one of LIBRARIES and every read of another object's private attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id in {"self", "cls"}) or node.attr in STDLIB_PUBLIC:
                continue
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] in LIBRARIES and (any(p.startswith("_") for p in parts)
                                          or any(a.name.startswith("_") for a in node.names)):
                found.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in LIBRARIES and any(p.startswith("_") for p in parts):
                    found.append(f"{node.lineno}: import {alias.name}")
    return found


@pytest.mark.parametrize("snippet", [
    "from mcp.server._otel import X",
    "from mcp.client.session import _clamp",
    "import httpx2._utils",
    "transport._requests_in_flight += 1",
    "x = self.other._hidden",
])
def test_the_private_name_check_catches(snippet: str) -> None:
    assert private_uses(snippet), snippet


@pytest.mark.parametrize("snippet", ["self._mine = 1", "cls._registry", "point._replace(x=1)", "from mcp import types"])
def test_the_private_name_check_allows(snippet: str) -> None:
    assert private_uses(snippet) == []


def test_private_names_of_libraries_only_in_sdk_seams() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): uses
        for path in _modules() if path.name != "_sdk.py" and (uses := private_uses(path.read_text()))
    }
    assert offenders == {}


def test_sdk_seams_have_contract_tests() -> None:
    tests = PACKAGE.parent / "tests"
    seams = [p.relative_to(PACKAGE) for p in _modules() if p.name == "_sdk.py"]
    assert seams, "the MCP SDK is reached through _sdk.py seams"
    missing = [str(s) for s in seams if not list((tests / s.parent).glob("test*sdk.py"))]
    assert missing == []


def test_no_module_over_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
