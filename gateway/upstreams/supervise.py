"""Every upstream supervised: started with retries, checked while up, started again when it fails.

    starting ──started──▶ up ──a check fails──▶ down ──wait (backoff)──▶ try again ──▶ up ...
        └──────failed──────────────────────────▶ down

A failed start or check is logged once, at ERROR, when the upstream goes down (and again only if
the reason changes); while it stays down one WARNING line every ``summary_seconds`` counts the
failed attempts; coming back is logged at WARNING. An upstream that keeps failing soon after it
comes up (a crash loop) is not relaunched at full speed: the backoff keeps growing until it stays up
for ``Backoff.maximum``, and the same failure is logged at ERROR at most once per ``summary_seconds``.
Each time an upstream comes up its tools are read again, and clients are told (``tools/list_changed``)
if the exposed tools changed.

Starting again is each upstream's own ``start``: a launched service is launched again, an MCP
connection reopened (its stdio server relaunched), an HTTP upstream only checked. An upstream that
is down is not taken out of the call path: its calls fail as "the tool failed" until it is back, and
an HTTP service that comes back serves calls at once, before the next check notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.core import clock
from gateway.core.errors import UpstreamDown
from gateway.core.limits import (
    UPSTREAM_CHECK_SECONDS,
    UPSTREAM_DOWN_SUMMARY_SECONDS,
    UPSTREAM_RETRY_FIRST_SECONDS,
    UPSTREAM_RETRY_MAX_SECONDS,
)
from gateway.upstreams.base import HealthChecked, Upstream
from gateway.upstreams.registry import ToolRegistry

__all__ = ["Backoff", "ProbeResult", "State", "Supervisor", "attempt", "probe"]

log = logging.getLogger("gateway.upstreams")


class State(StrEnum):
    """Where an upstream is: being started for the first time, serving, or failing."""

    STARTING = "starting"
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait between attempts (doubling, capped) and how often to check an upstream that is up."""

    first: float = UPSTREAM_RETRY_FIRST_SECONDS
    maximum: float = UPSTREAM_RETRY_MAX_SECONDS
    check_interval: float = UPSTREAM_CHECK_SECONDS

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failed attempt in a row."""
        return float(min(self.maximum, self.first * 2 ** min(max(failures - 1, 0), 32)))


@dataclass(slots=True)
class _Entry:
    upstream: Upstream
    state: State = State.STARTING
    since: float = field(default_factory=clock.now)
    reason: str | None = None  # public: short, no URL, path or secret
    failures: int = 0  # failures since it was last up for a while (sets the backoff)
    attempts: int = 0  # failed attempts in this outage
    up_at: float = 0.0  # monotonic time it last came up
    logged_at: float = -1e18  # monotonic time of the last ERROR or summary line
    logged_reason: str | None = None  # the reason that line gave
    loud: bool = False  # this outage was announced at ERROR (so its end is announced too)


async def attempt(upstream: Upstream, check: bool = True) -> None:
    """Start ``upstream`` and (``check``) that it serves; raise ``UpstreamDown`` saying why not."""
    try:
        await upstream.start()
        if check and isinstance(upstream, HealthChecked):
            await upstream.check()
    except UpstreamDown:
        raise
    except Exception as exc:  # any other failure of a start is still "down", never a crash of the gateway
        raise UpstreamDown(f"{upstream.name}: {type(exc).__name__}: {exc}", "failed to start") from exc


class Supervisor:
    """Starts the registry's upstreams, keeps them up, and reports their state (``/readyz``)."""

    def __init__(self, registry: ToolRegistry, backoff: Backoff | None = None,
                 summary_seconds: float = UPSTREAM_DOWN_SUMMARY_SECONDS) -> None:
        self._registry = registry
        self._backoff = backoff or Backoff()
        self._summary_seconds = summary_seconds
        self._entries = [_Entry(u) for u in registry.upstreams]
        self._tasks: list[asyncio.Task[None]] = []
        self._serving = False

    async def start(self) -> list[str]:
        """Try every upstream once (all at once), then supervise in the background; returns tool-name problems."""
        loop = asyncio.get_running_loop()
        tried = [loop.create_future() for _ in self._entries]
        self._tasks = [asyncio.create_task(self._supervise(entry, first), name=f"supervise-{entry.upstream.name}")
                       for entry, first in zip(self._entries, tried, strict=True)]
        await asyncio.gather(*tried)
        problems = self._registry.rebuild()
        self._serving = True
        return problems

    async def close(self) -> None:
        """Stop supervising and close every upstream."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for entry in self._entries:
            try:
                await entry.upstream.close()
            except Exception as exc:  # one that fails to close must not keep the others open
                log.warning("upstream %s did not close cleanly: %s", entry.upstream.name, exc)

    @property
    def ready(self) -> bool:
        """Whether every upstream is up."""
        return all(entry.state is State.UP for entry in self._entries)

    def statuses(self) -> list[dict[str, Any]]:
        """Each upstream's name, state, since when (ISO 8601, UTC), last error (public reason) and exposed tools."""
        return [{"name": e.upstream.name, "state": str(e.state),
                 "since": clock.rfc3339_offset(e.since),
                 "last_error": e.reason, "tools": self._registry.count(e.upstream)} for e in self._entries]

    async def _supervise(self, entry: _Entry, tried: asyncio.Future[None]) -> None:
        try:
            await self._keep_up(entry, tried)
        except Exception:  # a bug here must not hang the start or go unnoticed
            log.exception("supervising upstream %s failed; it is no longer restarted", entry.upstream.name)
        finally:
            if not tried.done():
                tried.set_result(None)

    async def _keep_up(self, entry: _Entry, tried: asyncio.Future[None]) -> None:
        while True:
            try:
                await attempt(entry.upstream)
            except UpstreamDown as exc:
                self._failed(entry, exc)
                if not tried.done():
                    tried.set_result(None)
                await asyncio.sleep(self._backoff.delay(entry.failures))
                continue
            self._up(entry)
            if not tried.done():
                tried.set_result(None)
            await self._watch(entry)
            if entry.failures > 1:  # it failed again soon after it came up: no relaunch loop at full speed
                await asyncio.sleep(self._backoff.delay(entry.failures - 1))

    async def _watch(self, entry: _Entry) -> None:
        """Return when the upstream fails a check (an upstream that cannot be checked is watched forever)."""
        upstream = entry.upstream
        while True:
            await asyncio.sleep(self._backoff.check_interval)
            if not isinstance(upstream, HealthChecked):
                continue
            try:
                await upstream.check()
            except UpstreamDown as exc:
                self._failed(entry, exc)
                return
            except Exception as exc:  # a check that breaks is a failed check
                self._failed(entry, UpstreamDown(f"{upstream.name}: check failed: {type(exc).__name__}: {exc}",
                                                 "check failed"))
                return

    def _failed(self, entry: _Entry, exc: UpstreamDown) -> None:
        now = time.monotonic()
        name = entry.upstream.name
        quiet = exc.reason == entry.logged_reason and now - entry.logged_at < self._summary_seconds
        if entry.state is not State.DOWN:
            if entry.state is State.UP and now - entry.up_at >= self._backoff.maximum:
                entry.failures = 0  # it had been up for a while: this is a new failure, not a flapping one
            entry.state, entry.since, entry.attempts = State.DOWN, clock.now(), 0
            entry.loud = not quiet  # the same failure again soon after the last one (flapping) is summarised
            if entry.loud:
                log.error("upstream %s is down: %s (retrying in the background)", name, exc)
        elif exc.reason != entry.logged_reason:
            log.error("upstream %s is still down, now: %s", name, exc)
            entry.loud, quiet = True, False
        elif not quiet:
            log.warning("upstream %s is still down: %d failed attempts since %s; last: %s", name,
                        entry.attempts + 1, clock.rfc3339_offset(entry.since),
                        exc)
        if quiet:
            log.debug("upstream %s: attempt failed: %s", name, exc)
        else:
            entry.logged_at, entry.logged_reason = now, exc.reason
        entry.failures += 1
        entry.attempts += 1
        entry.reason = exc.reason

    def _up(self, entry: _Entry) -> None:
        upstream = entry.upstream
        if entry.state is not State.DOWN:
            log.info("upstream %s is up: %d tools", upstream.name, len(upstream.tools()))
        elif entry.loud:
            log.warning("upstream %s is back after %d failed attempts: %d tools", upstream.name, entry.attempts,
                        len(upstream.tools()))
        else:
            log.debug("upstream %s is back", upstream.name)
        entry.state, entry.since, entry.up_at = State.UP, clock.now(), time.monotonic()
        if self._serving:  # at start the registry is built once all upstreams were tried
            self._registry.refresh()


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One upstream as `gateway check --probe` found it: its tools, or why it cannot be reached."""

    name: str
    tools: list[str]
    error: str | None = None


async def probe(upstreams: Sequence[Upstream], timeout: float | None = None, check: bool = True) -> list[ProbeResult]:
    """Start each upstream once (no retries; all at once; each within ``timeout``), read its tools, close it.

    ``check`` also asks each one to show it serves (an HTTP service declared tool by tool need not
    answer for its tools to be known: the catalog passes False).
    """

    async def one(upstream: Upstream) -> ProbeResult:
        try:
            async with asyncio.timeout(timeout):
                await attempt(upstream, check)
            return ProbeResult(upstream.name, [t.name for t in upstream.tools()])
        except UpstreamDown as exc:
            return ProbeResult(upstream.name, [], str(exc))
        except TimeoutError:
            return ProbeResult(upstream.name, [], f"no answer within {timeout:g}s")
        finally:
            with contextlib.suppress(Exception):
                await upstream.close()

    return list(await asyncio.gather(*(one(u) for u in upstreams)))
