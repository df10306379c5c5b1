"""The live tool catalog: start a config's upstreams, read the tools they expose, stop them again.

`gateway tools` prints it (a snapshot for offline checks in CI) and `gateway check --config` checks
policies against it. The tools are named, and collisions found, exactly as the running gateway does.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.core.diagnostics import Diagnostic
from gateway.core.limits import CATALOG_START_TIMEOUT_SECONDS
from gateway.policy.catalog import Catalog, CatalogTool
from gateway.upstreams.registry import ExposedTool, ToolRegistry
from gateway.upstreams.supervise import probe

__all__ = ["catalog_of", "read_catalog", "read_tools"]


def catalog_of(registry: ToolRegistry) -> Catalog:
    """The tools ``registry`` exposes now, as policies see them."""
    return Catalog.of(CatalogTool(t.name, t.upstream.name, t.info.title, t.spec.description,
                                  dict(t.spec.input_schema), dict(t.spec.annotations)) for t in registry.all())


async def read_catalog(registry: ToolRegistry, where: str, positions: Mapping[str, tuple[int, int]] | None = None,
                       timeout: float = CATALOG_START_TIMEOUT_SECONDS) -> tuple[Catalog | None, list[Diagnostic]]:
    """The catalog of ``read_tools``: None when it could not be read whole."""
    tools, problems = await read_tools(registry, where, positions, timeout)
    return (None if tools is None else catalog_of(registry)), problems


async def read_tools(registry: ToolRegistry, where: str, positions: Mapping[str, tuple[int, int]] | None = None,
                     timeout: float = CATALOG_START_TIMEOUT_SECONDS
                     ) -> tuple[list[ExposedTool] | None, list[Diagnostic]]:
    """Start every upstream, read the catalog, close them all (launched servers are stopped).

    None when an upstream did not start or tool names collide: a partial catalog would make every
    rule for the missing tools look wrong. ``where`` is the config file the diagnostics point at,
    ``positions`` each upstream's (line, column) in it. Starting is `gateway check --probe`'s.
    """
    at = positions or {}
    problems = [_unavailable(r.name, r.error, where, at) for r in await probe(registry.upstreams, timeout, check=False)
                if r.error is not None]
    problems.extend(Diagnostic("tool-names", p, where) for p in registry.rebuild())
    return (None if problems else registry.all()), problems


def _unavailable(name: str, why: str, where: str, positions: Mapping[str, tuple[int, int]]) -> Diagnostic:
    line, column = positions.get(name, (1, 1))
    return Diagnostic("upstream-unavailable", f"upstream {name!r} did not start: {why}", where, line, column,
                      hint="start it (or fix its config), or check offline against a snapshot with --tools")
