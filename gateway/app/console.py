"""The operator console's parts (`console:`, docs/console.md): the store's copy of the decision log, fed by the
audit log, and the read-only API over it. The page itself is gateway/frontends/console_page.py."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import Route

from gateway.approvals.service import ApprovalService
from gateway.config.load import LoadedConfig
from gateway.core.durations import parse_duration
from gateway.frontends.console_api import ConsoleSources, console_api_routes
from gateway.pipeline import Gateway
from gateway.store.decision_queries import DecisionQueries
from gateway.store.decisions import DecisionLog
from gateway.store.sql import SqlStore
from gateway.upstreams.registry import ExposedTool, ToolRegistry
from gateway.upstreams.supervise import Supervisor

__all__ = ["Console", "build_console"]


@dataclass
class Console:
    """The console's routes, and what to close when the gateway stops (nothing when it is off)."""

    routes: list[Route] = field(default_factory=list)
    decisions: DecisionLog | None = None
    queries: DecisionQueries | None = None

    def close(self) -> None:
        """Write the queued rows and stop the console's threads (before the store closes)."""
        if self.queries is not None:
            self.queries.close()
        if self.decisions is not None:
            self.decisions.close()


def replica_name() -> str:
    """What this process is called in the console's rows: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def build_console(config: LoadedConfig, gateway: Gateway, supervisor: Supervisor) -> Console:
    """The console of this gateway: its table fed by every event the audit log writes, and its API."""
    spec = config.spec.console
    store = gateway.store
    if not spec.enabled or not isinstance(store, SqlStore):
        return Console()
    decisions = DecisionLog(store.connect_new, store.where, replica_name(), parse_duration(spec.retention))
    gateway.audit.taps.append(decisions.record)
    queries = DecisionQueries(decisions)
    registry = gateway.registry
    sources = ConsoleSources(
        policies=lambda: gateway.policies.current, shown=gateway.policies.shown, upstreams=supervisor.statuses,
        tools=lambda: [_tool(t, registry) for t in registry.listed()],
        tools_lock=lambda: registry.pins.status() if registry.pins is not None else None)
    approvals = gateway.approvals if isinstance(gateway.approvals, ApprovalService) else None
    return Console(list(console_api_routes(queries, store, sources, approvals)), decisions, queries)


def _tool(tool: ExposedTool, registry: ToolRegistry) -> dict[str, Any]:
    spec, drift = tool.spec, tool.drift
    return {"name": tool.name, "upstream": tool.upstream.name, "title": spec.title or "",
            "description": spec.description, "input_schema": spec.input_schema, "output_schema": spec.output_schema,
            "annotations": spec.annotations, "pinned": tool.info.pinned,
            "drift": None if drift is None else {"changed": list(drift.changed), "old": drift.old, "new": drift.new},
            "hidden": registry.get(tool.name) is None}  # hidden from agents (`on_drift: hide`)
