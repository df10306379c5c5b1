"""CEL behind one small seam: pick an engine by name, compile once, evaluate per call."""

from __future__ import annotations

import importlib.util

from gateway.policy.cel.base import VARIABLES, Engine, ExprType, Program, check_result_type

__all__ = ["ENGINE_NAMES", "VARIABLES", "Engine", "ExprType", "Program", "check_result_type", "get_engine"]

ENGINE_NAMES = ("auto", "cel-expr-python", "cel-python")

_engines: dict[str, Engine] = {}


def get_engine(name: str = "auto") -> Engine:
    """The engine for ``name``; ``auto`` prefers the C++ engine when it can be imported."""
    if name == "auto":
        name = "cel-expr-python" if importlib.util.find_spec("cel_expr_python") else "cel-python"
    if name not in _engines:
        if name == "cel-expr-python":
            from gateway.policy.cel.cpp import CppEngine

            _engines[name] = CppEngine()
        elif name == "cel-python":
            from gateway.policy.cel.pure import PureEngine

            _engines[name] = PureEngine()
        else:
            raise ValueError(f"unknown CEL engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    return _engines[name]
