"""The named limits: one package, each name defined once, read from ``gateway.core.limits``, with its reason."""

from __future__ import annotations

import ast
import inspect
import pkgutil
from importlib import import_module
from types import ModuleType

import gateway.core.limits as limits


def _parts() -> list[ModuleType]:
    return [import_module(f"{limits.__name__}.{info.name}") for info in pkgutil.iter_modules(limits.__path__)]


def _names(module: ModuleType) -> list[str]:
    tree = ast.parse(inspect.getsource(module))
    return [target.id for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)]


def test_each_limit_is_defined_once_and_read_from_the_package() -> None:
    seen: dict[str, str] = {}
    for part in _parts():
        for name in _names(part):
            assert name.isupper(), f"{part.__name__}.{name}: a limit is a constant"
            assert name not in seen, f"{name} is defined in {seen[name]} and {part.__name__}"
            seen[name] = part.__name__
            assert getattr(limits, name) == getattr(part, name)
    assert len(seen) > 100
    assert set(seen) == {name for name in vars(limits) if name.isupper()}


def test_each_limit_says_why() -> None:
    for part in _parts():
        lines = inspect.getsource(part).splitlines()
        for number, line in enumerate(lines):
            if line[:1].isupper() and " = " in line:
                above = number - 1
                while above >= 0 and lines[above][:1].isupper() and " = " in lines[above]:
                    above -= 1  # a group of related limits shares the comment above it
                assert above >= 0 and lines[above].startswith("#"), f"{part.__name__}: {line} has no comment"
