"""The tools lock in force (`tools_lock:`), with what a drift is reported to: the audit log, a metric, the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gateway.config.load import LoadedConfig
from gateway.core.errors import AuditWriteError
from gateway.observe import Metrics
from gateway.upstreams.pinning import Drift, Pins, read_lock

__all__ = ["build_pins", "report_drifts"]

log = logging.getLogger("gateway.pins")


def build_pins(config: LoadedConfig) -> Pins | None:
    """The config's tools lock, read now (``ConfigError`` ``lock-unreadable`` when it cannot be); None without one."""
    spec = config.spec.tools_lock
    if spec is None:
        return None
    path = config.path(spec.file)
    return Pins(read_lock(path), str(path), spec.on_drift, spec.allow_new)


def report_drifts(pins: Pins, record: Callable[..., None], metrics: Metrics | None) -> None:
    """Each drift ``pins`` finds becomes one ``tool.drift`` audit event (``record(kind, **fields)``) and a metric.

    The tool is hidden or refused whether or not the event could be written: the drift is acted on first."""
    def report(drift: Drift) -> None:
        if metrics is not None:
            metrics.tool_drifted(drift.upstream)
        fields: dict[str, Any] = {**drift.to_event(), "action": pins.on_drift}
        try:
            record("tool.drift", **fields)
        except AuditWriteError as exc:
            log.error("the drift of %s %s could not be audited: %s", drift.kind, drift.name, exc)
        except Exception:  # never let the record break the upstream's listing: the drift is acted on regardless
            log.exception("the drift of %s %s could not be audited", drift.kind, drift.name)

    pins.report = report
