"""The prose of a tool's input schema, as one string: what ``tool.schema_text`` shows policies.

A model reads every ``description`` and ``title`` of a tool's input schema as well as the tool's own
description, so instructions can hide there too (tool poisoning: policies/tool-poisoning/). Computed
once per tool, when the gateway exposes it, never per call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["schema_text"]

_PROSE = ("title", "description")


def schema_text(schema: Any) -> str:
    """Every string ``title`` and ``description`` anywhere in ``schema``, in document order, one per line.

    The walk is iterative (a deep schema cannot exhaust the stack) and takes every such key at any depth,
    inside ``properties``, ``items``, ``$defs``, ``anyOf`` and the rest alike: a property named ``title``
    holds a schema, not a string, so it is walked rather than taken.
    """
    found: list[str] = []
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.extend(v for k, v in node.items() if k in _PROSE and isinstance(v, str) and v)
            stack.extend(reversed([v for v in node.values() if isinstance(v, dict | list)]))
        elif isinstance(node, list):
            stack.extend(reversed([v for v in node if isinstance(v, dict | list)]))
    return "\n".join(found)
