"""Policies that change while the gateway runs: watch the files, compile, swap atomically.

A change that fails to compile keeps the last good set and records the errors, which
`GET /v1/policies` shows. Watching is polling of modification times: no extra dependency, and
policy directories are small.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from gateway.diagnostics import Diagnostic, Severity
from gateway.policy.load import check_policies, load_policy_set
from gateway.policy.policyset import PolicySet
from gateway.store.sqlite import now_rfc3339

__all__ = ["PolicyHolder"]

log = logging.getLogger("gateway.reload")


class PolicyHolder:
    """The current policy set; readers take ``current`` once per call and keep that snapshot."""

    def __init__(self, paths: Sequence[Path], engine: str = "auto") -> None:
        self.paths = list(paths)
        self.engine = engine
        self.current: PolicySet = load_policy_set(self.paths, engine)
        gc.freeze()  # compiled policies live long: keep them out of the collector's full passes (p99)
        self.loaded_at = now_rfc3339()
        self.last_errors: list[Diagnostic] = []
        self.last_attempt_at = self.loaded_at
        self._stamp = self._fingerprint()

    def _fingerprint(self) -> tuple[tuple[str, int, int], ...]:
        seen: list[tuple[str, int, int]] = []
        for root in self.paths:
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))
            for f in files:
                try:
                    st = os.stat(f)
                except OSError:
                    continue
                seen.append((str(f), st.st_mtime_ns, st.st_size))
        return tuple(seen)

    def reload(self) -> bool:
        """Compile the files now; swap in the new set if it is clean. True when swapped."""
        self._stamp = self._fingerprint()
        self.last_attempt_at = now_rfc3339()
        policy_set, diagnostics = check_policies(self.paths, self.engine)
        if policy_set is None:
            self.last_errors = [d for d in diagnostics if d.severity is Severity.ERROR]
            for d in self.last_errors:
                log.error("policy reload failed, keeping revision %s: %s", self.current.revision, d.format())
            return False
        self.last_errors = []
        if policy_set.revision != self.current.revision:
            log.info("policies reloaded: revision %s -> %s", self.current.revision, policy_set.revision)
            self.current = policy_set
            self.loaded_at = now_rfc3339()
            gc.freeze()
        return True

    def changed(self) -> bool:
        """Whether any policy file changed since the last look."""
        return self._fingerprint() != self._stamp

    async def watch(self, interval: float) -> None:
        """Reload whenever the files change, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            if self.changed():
                # compiling is CPU work of a few ms; keep it off the event loop
                await asyncio.to_thread(self.reload)

    def status(self) -> dict[str, object]:
        """For `GET /v1/policies`."""
        return {**self.current.summary(), "loaded_at": self.loaded_at, "last_attempt_at": self.last_attempt_at,
                "errors": [d.to_dict() for d in self.last_errors]}
