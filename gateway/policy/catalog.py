"""The tool catalog a policy set is checked against: each exposed tool's name, schema and hints.

Pure data, no I/O: `gateway tools` writes it as JSON (a snapshot for offline checks in CI), and
`gateway check --config` builds it from the live upstreams. Rule matching uses the same glob as
decisions, so a check and a decision never disagree about which tools a rule covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.globs import glob_match, glob_problem, is_glob

__all__ = ["CATALOG_VERSION", "CLIENT_UPSTREAM", "Catalog", "CatalogTool"]

# The version of the JSON snapshot's shape; a snapshot of another version is refused, not guessed at.
CATALOG_VERSION = 1
CLIENT_UPSTREAM = "client"  # tool.upstream of a tool the agent runs itself (the model proxy)
_ANY_ARGUMENTS = {"type": "object", "additionalProperties": True}  # a declared agent tool: its schema is the agent's


@dataclass(frozen=True, slots=True)
class CatalogTool:
    """One exposed tool as policies see it (``tool.*``), plus its input schema (``args``)."""

    name: str
    upstream: str = ""
    title: str = ""
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The tool's entry in a snapshot."""
        return {"name": self.name, "upstream": self.upstream, "title": self.title, "description": self.description,
                "input_schema": dict(self.input_schema), "annotations": dict(self.annotations)}


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every exposed tool, by name."""

    tools: Mapping[str, CatalogTool]
    # Tools the agent runs itself, declared as globs (`models[].client_tools`): a rule naming a tool
    # these match is about a real tool, though no schema is known for it.
    client_globs: tuple[str, ...] = ()

    @classmethod
    def of(cls, tools: Iterable[CatalogTool]) -> Catalog:
        """A catalog of these tools."""
        return cls({t.name: t for t in tools})

    def with_client_tools(self, patterns: Iterable[str]) -> Catalog:
        """This catalog plus the agent-run tools declared by ``patterns`` (names, globs), as upstream
        ``client`` with any arguments; a gateway tool of the same name keeps its entry."""
        tools, globs = dict(self.tools), list(self.client_globs)
        for pattern in patterns:
            if glob_problem(pattern) is None and is_glob(pattern):
                globs.append(pattern)
            else:
                tools.setdefault(pattern, CatalogTool(pattern, CLIENT_UPSTREAM, input_schema=_ANY_ARGUMENTS))
        return Catalog(tools, tuple(dict.fromkeys(globs)))

    def declares(self, pattern: str) -> bool:
        """Whether ``pattern`` (a rule's ``tools:`` entry) names an agent-run tool declared by a glob."""
        return any(pattern == g or glob_match(pattern, g) for g in self.client_globs)

    def matching(self, patterns: Sequence[str] | None) -> list[CatalogTool]:
        """The tools a rule's ``tools:`` list covers (None: every tool), in name order."""
        if patterns is None:
            return [self.tools[n] for n in sorted(self.tools)]
        return [self.tools[n] for n in sorted(self.tools) if any(n == p or glob_match(n, p) for p in patterns)]

    def to_json(self) -> dict[str, Any]:
        """The snapshot `gateway tools --format json` prints."""
        return {"version": CATALOG_VERSION, "tools": [self.tools[n].to_json() for n in sorted(self.tools)]}

    @classmethod
    def from_json(cls, data: Any) -> Catalog:
        """A catalog from a snapshot; ValueError saying what is wrong with it."""
        shaped = isinstance(data, dict) and isinstance(data.get("tools"), list)
        if not shaped or data.get("version") != CATALOG_VERSION:
            raise ValueError(f"not a tool catalog snapshot of version {CATALOG_VERSION}: expected"
                             " {\"version\": 1, \"tools\": [...]} as `gateway tools --format json` writes")
        tools = []
        for i, entry in enumerate(data["tools"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ValueError(f"tools[{i}] needs a string 'name'")
            schema, hints = entry.get("input_schema", {"type": "object"}), entry.get("annotations", {})
            if not isinstance(schema, dict) or not isinstance(hints, dict):
                raise ValueError(f"tools[{i}] ({entry['name']}): 'input_schema' and 'annotations' must be objects")
            tools.append(CatalogTool(entry["name"], str(entry.get("upstream", "")), str(entry.get("title") or ""),
                                     str(entry.get("description") or ""), schema, hints))
        return cls.of(tools)
