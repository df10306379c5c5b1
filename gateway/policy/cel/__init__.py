"""CEL behind one small seam: pick an engine by name, compile once, evaluate per call."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from gateway.policy.cel.base import VARIABLES, Engine, ExprType, Program, check_result_type

__all__ = ["ENGINE_NAMES", "VARIABLES", "Engine", "ExprType", "Program", "check_result_type", "get_engine"]

ENGINE_NAMES = ("auto", "cel-expr-python", "cel-python")

_engines: dict[tuple[str, tuple[str, ...]], Engine] = {}


def get_engine(name: str = "auto", variables: Sequence[str] = VARIABLES) -> Engine:
    """The engine for ``name``; ``auto`` prefers the C++ engine when it can be imported.

    ``variables``: the names its expressions may read; a policy's by default (identity mappings read
    ``claims``, their roles ``principal``).
    """
    if name == "auto":
        name = "cel-expr-python" if importlib.util.find_spec("cel_expr_python") else "cel-python"
    key = (name, tuple(variables))
    if key not in _engines:
        if name == "cel-expr-python":
            from gateway.policy.cel.cpp import CppEngine

            _engines[key] = CppEngine(key[1])
        elif name == "cel-python":
            from gateway.policy.cel.pure import PureEngine

            _engines[key] = PureEngine(key[1])
        else:
            raise ValueError(f"unknown CEL engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    return _engines[key]
