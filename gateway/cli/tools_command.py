"""`gateway tools --config gateway.yaml`: the tools a config exposes, as policies see them.

``--format json`` prints the catalog snapshot (``Catalog.to_json()``, deterministic) that
`gateway check --tools tools.json` checks policies against offline, e.g. in CI. ``--lock`` prints the
tools lock (`tools_lock:`, upstreams/pinning.py): each tool's pinned digests and its description.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import GatewayError
from gateway.policy.catalog import Catalog, CatalogTool

if TYPE_CHECKING:
    from gateway.upstreams.pinning import Pin
    from gateway.upstreams.registry import ToolRegistry

T = TypeVar("T")

__all__ = ["catalog_for_check", "live_catalog", "live_pins", "load_snapshot", "register", "render_catalog", "tools"]


def register(sub: Any) -> None:
    """Add `tools` to the `gateway` parser's subparsers."""
    parser = sub.add_parser("tools", help="start the config's upstreams and print the tools they expose")
    parser.add_argument("--config", required=True, help="gateway.yaml")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="json: the snapshot `gateway check --tools` reads")
    parser.add_argument("--lock", action="store_true",
                        help="print the tools lock (`tools_lock: {file: tools.lock}`) of the tools listed now")
    parser.set_defaults(func=tools)


def tools(args: argparse.Namespace) -> int:
    """Print the live catalog; exit 1 (printing no catalog) when it cannot be read whole."""
    from gateway.cli.diagnostics_output import print_diagnostics
    from gateway.config.load import check_config

    config, problems = check_config(args.config)
    if config is not None and args.lock:
        from gateway.upstreams.pinning import lock_text

        listed, problems = live_pins(config)
        if listed is not None:
            print(lock_text(listed), end="")
            return 0
    catalog = None
    if config is not None and not args.lock:
        catalog, problems = live_catalog(config)
    if catalog is None:
        print_diagnostics(problems, False, {})
        return 1
    if args.format == "json":
        print(json.dumps(catalog.to_json(), indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(render_catalog(catalog))
    return 0


def live_catalog(config: Any) -> tuple[Catalog | None, list[Diagnostic]]:
    """Start the config's upstreams, read their tools, stop them (``config`` is a ``LoadedConfig``)."""
    from gateway.upstreams.catalog import catalog_of, read_tools

    registry, problems = _registry(config)
    if registry is None:
        return None, problems
    listed, problems = _run(read_tools(registry, str(config.file), _positions(config)))
    return (None if listed is None else catalog_of(registry)), problems


def live_pins(config: Any) -> tuple[list[Pin] | None, list[Diagnostic]]:
    """Every tool, resource, template and prompt the config's upstreams list now, as the tools lock pins them (no
    lock applied); None when not all could be read."""
    from gateway.upstreams.catalog import read_tools
    from gateway.upstreams.items import ItemCatalog
    from gateway.upstreams.pinning import pin_of

    registry, problems = _registry(config)
    if registry is None:
        return None, problems
    listed, problems = _run(read_tools(registry, str(config.file), _positions(config)))
    if listed is None:
        return None, problems
    return [pin_of(t.name, t.upstream.name, t.spec) for t in listed] + ItemCatalog(registry).pins(), problems


def _registry(config: Any) -> tuple[ToolRegistry | None, list[Diagnostic]]:
    from gateway.app import build_registry

    try:
        return build_registry(config), []
    except GatewayError as exc:  # e.g. an OpenAPI document that cannot be read
        found = getattr(exc, "diagnostics", None)
        return None, list(found) if found else [Diagnostic("upstream-unavailable", str(exc), str(config.file))]


def _positions(config: Any) -> dict[str, tuple[int, int]]:
    positions = {}
    for i, upstream in enumerate(config.spec.upstreams):
        pos = config.document.position(("upstreams", i, "name"))
        positions[upstream.name] = (pos.line, pos.column)
    return positions


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to completion; in a thread of its own when this thread already runs an event loop
    (the command called in-process, from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def load_snapshot(file: str) -> tuple[Catalog | None, list[Diagnostic]]:
    """A catalog snapshot written by `gateway tools --format json`; a diagnostic when it is not one."""
    try:
        data = json.loads(Path(file).read_bytes())
        return Catalog.from_json(data), []
    except OSError as exc:
        why = f"cannot read the tool catalog: {exc.strerror or exc}"
    except ValueError as exc:  # not JSON, not UTF-8, or not a snapshot
        why = f"not a tool catalog: {exc}"
    return None, [Diagnostic("invalid-catalog", why, file, hint="write it with `gateway tools --config gateway.yaml"
                             " --format json > tools.json`")]


def render_catalog(catalog: Catalog) -> str:
    """One block a tool: name, upstream, arguments (required ones marked *), annotations, description."""
    lines: list[str] = []
    for name in sorted(catalog.tools):
        tool = catalog.tools[name]
        lines.append(f"{name}  ({tool.upstream})" if tool.upstream else name)
        lines.append(f"    args: {_arguments(tool) or '-'}")
        if tool.annotations:
            hints = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(tool.annotations.items()))
            lines.append(f"    annotations: {hints}")
        summary = (tool.title or tool.description).strip().splitlines()
        if summary:
            lines.append(f"    {summary[0]}")
    lines.append(f"{len(catalog.tools)} tools")
    return "\n".join(lines)


def _arguments(tool: CatalogTool) -> str:
    props = tool.input_schema.get("properties")
    required = tool.input_schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    if not isinstance(props, dict):
        return ""
    return ", ".join(f"{k}*" if k in needed else str(k) for k in props)


def catalog_for_check(args: argparse.Namespace, config: Any) -> tuple[Catalog | None, list[Diagnostic]]:
    """The catalog `gateway check` checks against: the ``--tools`` snapshot, else the config's live
    upstreams (unless ``--no-upstreams``, or the config has none), plus the agent-run tools its
    ``models[].client_tools`` declare; None: no catalog checks."""
    declared = [p for m in config.spec.models for p in m.client_tools or ()] if config is not None else []
    if args.tools:
        catalog, problems = load_snapshot(args.tools)
    elif config is None or args.no_upstreams:
        return None, []
    elif not config.spec.upstreams:  # a model proxy for agent-run tools only: they are the catalog
        catalog, problems = (Catalog.of(()), []) if declared else (None, [])
    else:
        catalog, problems = live_catalog(config)
    return (catalog.with_client_tools(declared) if catalog is not None else None), problems

