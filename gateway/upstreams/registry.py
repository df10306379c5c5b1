"""All upstreams' tools under the names agents see, each with its input-schema validator.

Names are ``{prefix}_{tool}`` and must match ``^[a-zA-Z0-9_-]{1,64}$`` (what OpenAI and
Anthropic function calling accept). A collision at start is a config error; one that appears
later (an MCP server renamed a tool) keeps the first tool and logs the second.

With a tools lock (``upstreams/pinning.py``) each tool is checked against its pin when it is listed: a
drifted tool is left out of ``all`` and ``get`` (``on_drift: hide``: its calls are unknown), or kept with
``refused`` set (``reject``), or kept as it is (``warn``); ``tool.pinned`` says which tools match.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from gateway.policy.call import ToolInfo
from gateway.upstreams.argument_errors import ArgumentProblem, describe
from gateway.upstreams.base import Upstream, UpstreamTool
from gateway.upstreams.pinning import Drift, Pins
from gateway.upstreams.schema_accept import Accepts, accepting

__all__ = ["ExposedTool", "Source", "ToolRegistry", "expose"]

log = logging.getLogger("gateway.registry")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

Namer = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Source:
    """An upstream, how its tools are named, and its own call timeout."""

    upstream: Upstream
    namer: Namer
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class ExposedTool:
    """A tool as the gateway exposes it."""

    name: str
    upstream: Upstream
    spec: UpstreamTool
    info: ToolInfo
    validator: Any  # a jsonschema validator, or None when the tool's schema itself is invalid
    timeout: float | None = None  # the upstream's own timeout, if it set one
    accepts: Accepts | None = None  # a quick "fits" for common schemas (upstreams/schema_accept.py)
    drift: Drift | None = None  # how it differs from the tools lock (None: it matches, or there is no lock)
    refused: str | None = None  # why its calls are refused (`tools_lock.on_drift: reject`), else None

    def schema_errors(self, arguments: dict[str, Any]) -> list[ArgumentProblem]:
        """Why ``arguments`` do not fit the tool's input schema, argument by argument (empty when they do)."""
        if self.validator is None or (self.accepts is not None and self.accepts(arguments)):
            return []
        return describe(self.validator.iter_errors(arguments))


class ToolRegistry:
    """Exposed name → tool, rebuilt when an upstream's tool list changes."""

    def __init__(self, sources: Sequence[Source], pins: Pins | None = None) -> None:
        self._sources = list(sources)
        self.pins = pins
        self._tools: dict[str, ExposedTool] = {}  # what agents see (a drifted tool is left out under `hide`)
        self._listed: dict[str, ExposedTool] = {}  # every tool the upstreams list
        self._listeners: list[Callable[[], None]] = []
        for source in self._sources:
            source.upstream.on_tools_changed(self._changed)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Be told after the tool set changed (the MCP frontend sends list_changed)."""
        self._listeners.append(callback)

    def rebuild(self) -> list[str]:
        """Recompute the exposed tools; returns the problems (collisions, bad names)."""
        tools: dict[str, ExposedTool] = {}
        problems: list[str] = []
        previous = self._listed
        for source in self._sources:
            upstream = source.upstream
            for spec in upstream.tools():
                name = source.namer(spec.name)
                if not _NAME.match(name):
                    problems.append(f"upstream {upstream.name}: tool {spec.name!r} would be exposed as {name!r},"
                                    " which is not ^[a-zA-Z0-9_-]{1,64}$; set a shorter prefix")
                    continue
                if name in tools:
                    problems.append(f"tool name {name!r} is exposed by both {tools[name].upstream.name} and"
                                    f" {upstream.name}; give one upstream a different prefix")
                    continue
                old = previous.get(name)
                tools[name] = old if old is not None and old.spec == spec and old.upstream is upstream \
                    else _expose(name, source, spec, self.pins)
        self._listed = tools
        if self.pins is not None:
            self.pins.forget_missing("tool", tools)
        hide = self.pins is not None and self.pins.on_drift == "hide"
        self._tools = {name: tool for name, tool in tools.items() if not (hide and tool.drift is not None)}
        return problems

    def _changed(self) -> None:
        for problem in self.rebuild():
            log.warning("%s", problem)
        for listener in self._listeners:
            listener()

    def refresh(self) -> None:
        """Re-read every upstream's tools (one came back); listeners hear of it only if the exposed set changed."""
        before = {name: (tool.upstream, tool.spec) for name, tool in self._tools.items()}
        for problem in self.rebuild():
            log.warning("%s", problem)
        if {name: (tool.upstream, tool.spec) for name, tool in self._tools.items()} != before:
            for listener in self._listeners:
                listener()

    def count(self, upstream: Upstream) -> int:
        """How many tools ``upstream`` has exposed now."""
        return sum(1 for tool in self._tools.values() if tool.upstream is upstream)

    def get(self, name: str) -> ExposedTool | None:
        """The tool exposed under ``name``."""
        return self._tools.get(name)

    def all(self) -> list[ExposedTool]:
        """Every exposed tool, by name."""
        return [self._tools[k] for k in sorted(self._tools)]

    def listed(self) -> list[ExposedTool]:
        """Every tool the upstreams list, by name: with those the tools lock hides (``drift`` says which)."""
        return [self._listed[k] for k in sorted(self._listed)]

    @property
    def sources(self) -> list[Source]:
        """The upstreams with their namers, in config order."""
        return list(self._sources)

    @property
    def upstreams(self) -> list[Upstream]:
        """The upstreams behind the tools."""
        return [s.upstream for s in self._sources]


def _expose(name: str, source: Source, spec: UpstreamTool, pins: Pins | None = None) -> ExposedTool:
    upstream = source.upstream
    drift = pins.check(name, upstream.name, spec) if pins is not None else None
    validator = accepts = None
    try:
        cls = jsonschema.validators.validator_for(spec.input_schema)
        cls.check_schema(spec.input_schema)
        validator = cls(spec.input_schema)
        accepts = accepting(spec.input_schema)
    except jsonschema.SchemaError as exc:
        log.warning("tool %s has an invalid input schema (%s); arguments will not be checked", name, exc.message)
    info = ToolInfo(name=name, upstream=upstream.name, title=spec.title or "", description=spec.description,
                    annotations=dict(spec.annotations), pinned=pins is not None and drift is None)
    refused = drift.refusal() if drift is not None and pins is not None and pins.on_drift == "reject" else None
    return ExposedTool(name, upstream, spec, info, validator, source.timeout, accepts, drift, refused)


def expose(name: str, upstream: Upstream, spec: UpstreamTool) -> ExposedTool:
    """A tool outside any registry (the model proxy's agent-run tools), with its input-schema validator."""
    return _expose(name, Source(upstream, str), spec)
