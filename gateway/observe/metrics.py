"""Prometheus metrics: what the pipeline counts, and the text a scrape of GET /metrics gets.

One process: the series live in this object's own registry. Several worker processes on one machine
(``gateway serve --workers N``): set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory shared by the
workers before they start (``prepare_multiprocess_dir`` does it); every worker then writes its values
to files there, and any worker's scrape adds up all of them (prometheus_client's multiprocess mode).
Gauges of things in progress are summed over live workers only.

Label values come from a bounded set (verdicts, outcomes, stages, rule names from the loaded
policies, upstream names from the config): never a call id, a principal or an argument.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.multiprocess import mark_process_dead as _mark_process_dead
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "MULTIPROC_ENV", "Metrics", "counting_reloads", "families", "multiprocess_dir",
           "prepare_multiprocess_dir", "worker_exited"]

log = logging.getLogger("gateway.observe")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# A policy decision takes microseconds (bench/decision.py): buckets from 5 µs to 50 ms.
_DECISION_BUCKETS = (5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 5e-2)
# A call or an upstream leg: from a millisecond to a minute (the longest call timeouts).
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A person deciding: seconds to hours.
_APPROVAL_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0, 86400.0)


# No `*_created` series beside every counter and histogram: they double a scrape and no panel reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


def multiprocess_dir() -> str | None:
    """The shared directory of multiprocess mode, or None in single-process mode."""
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower()) or None


def prepare_multiprocess_dir() -> str:
    """Before starting worker processes: an empty directory for their metric files, exported in the
    environment the workers inherit (a directory already named by PROMETHEUS_MULTIPROC_DIR is emptied,
    since files of an earlier run would be added to this one's)."""
    path = multiprocess_dir()
    if path is None:
        path = tempfile.mkdtemp(prefix="gateway-metrics-")
        os.environ[MULTIPROC_ENV] = path
    else:
        os.makedirs(path, exist_ok=True)
        for entry in os.scandir(path):
            if entry.is_file() and entry.name.endswith(".db"):
                os.unlink(entry.path)
            elif entry.is_dir():
                shutil.rmtree(entry.path)
    return path


def worker_exited(pid: int) -> None:
    """Drop a dead worker's in-progress gauges (call from the process that supervises the workers)."""
    path = multiprocess_dir()
    if path is not None:
        _mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


class Metrics:
    """The gateway's series, on a registry of their own (so two gateways in one process never mix)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.decisions = Counter("gateway_decisions", "Policy decisions by stage, verdict and deciding rule",
                                 ["stage", "verdict", "rule"], registry=r)
        self.decision_seconds = Histogram("gateway_decision_duration_seconds", "Time to decide one stage of a call",
                                          ["stage"], buckets=_DECISION_BUCKETS, registry=r)
        self.calls = Counter("gateway_calls", "Calls by upstream and outcome (the decision the caller got)",
                             ["upstream", "outcome"], registry=r)
        self.call_seconds = Histogram("gateway_call_duration_seconds", "Time in the gateway per call, end to end",
                                      ["upstream", "outcome"], buckets=_CALL_BUCKETS, registry=r)
        self.upstream_seconds = Histogram("gateway_upstream_duration_seconds", "The upstream leg of a call",
                                          ["upstream", "outcome"], buckets=_CALL_BUCKETS, registry=r)
        self.upstream_errors = Counter("gateway_upstream_errors", "Upstream calls that failed, by kind",
                                       ["upstream", "kind"], registry=r)
        self.approvals_pending = Gauge("gateway_approvals_pending", "Held calls whose caller waits for a decision",
                                       registry=r, multiprocess_mode="livesum")
        self.approval_wait = Histogram("gateway_approval_wait_seconds", "How long a held call waited, by result",
                                       ["result"], buckets=_APPROVAL_BUCKETS, registry=r)
        self.audit_failures = Counter("gateway_audit_write_failures", "Audit events that could not be written",
                                      registry=r)
        self.reloads = Counter("gateway_policy_reloads", "Policy reloads by result", ["result"], registry=r)
        self.share_refusals = Counter("gateway_share_refusals", "Requests refused past a share of connections"
                                      " (principal, pool, reserved) and calls answered at once past the held-call"
                                      " share (held)", ["share"], registry=r)
        self.auth_refusals = Counter("gateway_auth_refusals", "Bearer tokens refused, by reason (a bounded set:"
                                     " expired, bad-audience, unknown-key, ...)", ["reason"], registry=r)
        self.sso_refusals = Counter("gateway_sso_refusals", "Sign-ins at the approvals page refused, by reason (a"
                                    " bounded set: bad-state, not-approver, idp-unavailable, ...)", ["reason"],
                                    registry=r)
        self.tool_drifts = Counter("gateway_tool_drifts", "Tools whose definition differs from the tools lock, each"
                                   " drift counted once, by upstream", ["upstream"], registry=r)
        self.active_runs = Gauge("gateway_active_runs", "Runs (sessions) with a call in progress",
                                 registry=r, multiprocess_mode="livesum")
        self.in_flight = Gauge("gateway_calls_in_flight", "Calls in progress", registry=r,
                               multiprocess_mode="livesum")
        self._runs: dict[tuple[str, str], int] = {}  # run → its calls in progress, in this process
        # labelled children by label values: ``labels()`` checks and locks on every call, a dict lookup does not
        self._decided: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._finished: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._upstream: dict[tuple[str, str], Any] = {}
        self._open_approvals = _OpenApprovals()
        r.register(self._open_approvals)

    def count_open_approvals(self, count: Callable[[], int]) -> None:
        """Where a scrape reads how many approval requests are pending in the store (a blocking call: scrapes
        run off the event loop)."""
        self._open_approvals.count = count

    # --- what the pipeline reports ----------------------------------------------------------------

    def call_started(self, run: tuple[str, str]) -> None:
        """A call began in this run."""
        self.in_flight.inc()
        held = self._runs.get(run, 0)
        self._runs[run] = held + 1
        if not held:
            self.active_runs.inc()

    def call_ended(self, run: tuple[str, str]) -> None:
        """A call of this run ended, however it ended."""
        self.in_flight.dec()
        held = self._runs.pop(run, 1) - 1
        if held:
            self._runs[run] = held
        else:
            self.active_runs.dec()

    def decided(self, stage: str, verdict: str, rule: str | None, seconds: float) -> None:
        """One stage's decision."""
        key = (stage, verdict, rule or "default")  # no rule decided: the default verdict
        children = self._decided.get(key)
        if children is None:
            children = self._decided[key] = (self.decisions.labels(*key), self.decision_seconds.labels(stage))
        children[0].inc()
        children[1].observe(seconds)

    def finished(self, upstream: str, outcome: str, seconds: float) -> None:
        """A call's outcome (upstream is "" when the call never reached a tool)."""
        key = (upstream, outcome)
        children = self._finished.get(key)
        if children is None:
            children = self._finished[key] = (self.calls.labels(*key), self.call_seconds.labels(*key))
        children[0].inc()
        children[1].observe(seconds)

    def upstream_called(self, upstream: str, outcome: str, seconds: float | None) -> None:
        """One upstream leg; ``outcome`` is ok, tool_error, or an error kind (failed, not_reached, cancelled)."""
        if seconds is not None:
            key = (upstream, outcome)
            child = self._upstream.get(key)
            if child is None:
                child = self._upstream[key] = self.upstream_seconds.labels(*key)
            child.observe(seconds)
        if outcome not in ("ok", "tool_error"):
            self.upstream_errors.labels(upstream, outcome).inc()

    def approval_waited(self, result: str, seconds: float) -> None:
        """A held call's wait ended: approved, pending (the caller stopped waiting), or why not."""
        self.approval_wait.labels(result).observe(seconds)

    def audit_failed(self) -> None:
        """An audit event could not be written."""
        self.audit_failures.inc()

    def share_refused(self, share: str) -> None:
        """A request refused past a share of connections, or a call not held past its principal's held calls."""
        self.share_refusals.labels(share).inc()

    def auth_refused(self, reason: str) -> None:
        """A bearer token refused (gateway/auth/jwt.py): ``reason`` is one of ``core.errors.TOKEN_REFUSALS``."""
        self.auth_refusals.labels(reason).inc()

    def sso_refused(self, reason: str) -> None:
        """One sign-in at the approvals page refused (``reason`` is one of a fixed set of words)."""
        self.sso_refusals.labels(reason).inc()

    def tool_drifted(self, upstream: str) -> None:
        """A tool of ``upstream`` was listed with a definition the tools lock does not hold (upstreams/pinning.py)."""
        self.tool_drifts.labels(upstream).inc()

    def reloaded(self, result: str) -> None:
        """A policy reload: applied, refused (invalid files) or unrecorded (the audit log failed)."""
        self.reloads.labels(result).inc()

    # --- exposition ----------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The text format a scrape gets: this process's series, or every worker's in multiprocess mode."""
        path = multiprocess_dir()
        if path is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=path)  # type: ignore[no-untyped-call]
        merged.register(self._open_approvals)  # read from the shared store, not from the workers' files
        return generate_latest(merged)


class _OpenApprovals(Collector):
    """gateway_approvals_open, read from the store at each scrape. The store is shared, so every replica reports
    the same fleet-wide number: aggregate with max(), not sum()."""

    def __init__(self) -> None:
        self.count: Callable[[], int] | None = None

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """The count now; no sample when the store cannot be read (a missing point, not a wrong one)."""
        if self.count is None:
            return
        try:
            value = self.count()
        except Exception as exc:  # the store is busy or down: the scrape still answers
            log.warning("metrics: open approvals not counted: %s", exc)
            return
        family = GaugeMetricFamily("gateway_approvals_open", "Approval requests pending in the store (every "
                                   "replica reports the same number)")
        family.add_metric([], value)
        yield family


def families(text: bytes) -> Iterable[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample in an exposition (for tools and tests)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            yield sample.name, dict(sample.labels), sample.value


def counting_reloads(listener: Callable[[dict[str, Any]], None], metrics: Metrics) -> Callable[[dict[str, Any]], None]:
    """A reload listener (the audit log's write) that also counts reloads: applied, refused, or unrecorded when
    the listener fails (the reload is then not made, see gateway/reload/holder.py)."""

    def report(event: dict[str, Any]) -> None:
        try:
            listener(event)
        except Exception:
            metrics.reloaded("unrecorded")
            raise
        metrics.reloaded("applied" if event.get("applied") else "refused")

    return report
