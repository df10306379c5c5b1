"""Policies that change while the gateway runs: watch the files, wait until they settle, check, swap.

A change is loaded only after the files have stayed unchanged for a settle interval (so a save or a
deploy in progress is never loaded half-written), and only when they did not move while being read
(a Kubernetes ``..data`` swap is one change). With a manifest, a set loads only when every file
matches it. A set that fails any of this keeps the last good one and records the errors, which
`GET /v1/policies` shows. Every swap is reported (``on_reload``, for the audit log) with its diff;
one that removes rules or files is logged as a warning. Watching is polling: no extra dependency,
and policy directories are small.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import PolicyLoadError
from gateway.core.limits import DEFAULT_SETTLE_SECONDS, MAX_POLICY_FILE_BYTES, POLICY_START_ATTEMPTS
from gateway.policy.load import check_policies
from gateway.policy.policyset import PolicySet
from gateway.reload.diff import diff_sets
from gateway.reload.fileset import Fingerprint, Moved, Settler, display_path, fingerprint, read_stamped, swapped_whole
from gateway.reload.manifest import verify_manifest

__all__ = ["RELOAD_EVENT", "PolicyHolder"]

log = logging.getLogger("gateway.reload")

# The `event` of audit records written for reloads (call records have no `event`).
RELOAD_EVENT = "policy.reload"

ReloadListener = Callable[[dict[str, Any]], None]


class PolicyHolder:
    """The current policy set; readers take ``current`` once per call and keep that snapshot."""

    def __init__(self, paths: Sequence[Path], engine: str = "auto", *, settle: float = DEFAULT_SETTLE_SECONDS,
                 manifest: Path | None = None, base: Path | None = None,
                 on_reload: ReloadListener | None = None) -> None:
        self.paths = list(paths)
        self.engine = engine
        self.manifest = manifest
        self.base = base
        self.on_reload = on_reload
        self.last_errors: list[Diagnostic] = []
        self.settle = settle
        self.current, stamp = self._first_load(settle)
        gc.freeze()  # compiled policies live long: keep them out of the collector's full passes (p99)
        self.loaded_at = now_rfc3339()
        self.last_attempt_at = self.loaded_at
        self._settler = Settler(settle, stamp)
        # Told (on the event loop) after ``watch`` swapped in a new set: the MCP frontend re-checks tool lists.
        self.swap_listeners: list[Callable[[], None]] = []

    # --- loading -----------------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        """Where diagnostics about the set as a whole point."""
        return str(self.paths[0]) if self.paths else "."

    def _fingerprint(self) -> Fingerprint:
        return fingerprint(self.paths, [self.manifest] if self.manifest else [])

    def _snapshot(self, seen: Fingerprint) -> tuple[dict[Path, bytes], list[Diagnostic]] | None:
        """The bytes of exactly the files ``seen`` stamped, and the ones that cannot be read; None when
        any of them changed since (the set is still being written, or was swapped mid-read)."""
        contents: dict[Path, bytes] = {}
        unreadable: list[Diagnostic] = []
        for stamp in seen.files:
            try:
                contents[Path(stamp.path)] = read_stamped(stamp, MAX_POLICY_FILE_BYTES)
            except Moved:
                return None
            except OSError as exc:
                unreadable.append(Diagnostic("unreadable", f"cannot read {stamp.path}: {exc.strerror or exc}",
                                             stamp.path))
        if self._fingerprint() != seen:  # a file came or went while the others were read
            return None
        return contents, unreadable

    def _compile(self, seen: Fingerprint) -> tuple[PolicySet | None, list[Diagnostic]] | None:
        """Check (the manifest, when configured) and compile one snapshot of the files ``seen`` stamped;
        errors only when it failed. None when the files changed under the read: try again later."""
        snapshot = self._snapshot(seen)
        if snapshot is None:
            return None
        contents, unreadable = snapshot
        if unreadable:
            return None, unreadable
        if self.manifest is not None:
            # read where the stamp saw it: with a ConfigMap, the same version directory as the files
            stamp = seen.extra[0] if seen.extra else None
            mismatch = verify_manifest(self.manifest, contents, Path(stamp.real) if stamp and stamp.real else None)
            if mismatch:
                return None, mismatch
        policy_set, diagnostics = check_policies(self.paths, self.engine, contents)
        return policy_set, [d for d in diagnostics if d.severity is Severity.ERROR]

    def _first_load(self, settle: float) -> tuple[PolicySet, Fingerprint]:
        """Load at start; files that change while being read are read again. Raises ``PolicyLoadError``."""
        for _ in range(POLICY_START_ATTEMPTS):
            seen = self._fingerprint()
            compiled = self._compile(seen)
            if compiled is None:
                time.sleep(settle)
                continue
            policy_set, errors = compiled
            if policy_set is None:
                raise PolicyLoadError(errors)
            return policy_set, seen
        raise PolicyLoadError([Diagnostic("policies-changing", "the policy files kept changing while they were loaded",
                                          self._where, hint="start the gateway once the files are written")])

    def poll(self, now: float | None = None) -> bool:
        """One look at the files: load them once a change has settled. True when a new set was swapped in."""
        seen = self._fingerprint()
        if not self._settler.ready(seen, time.monotonic() if now is None else now):
            return False
        return self._attempt(seen)

    def reload(self) -> bool:
        """Check and compile the files now, without waiting for them to settle. True when a new set was swapped in."""
        return self._attempt(self._fingerprint())

    def _attempt(self, seen: Fingerprint) -> bool:
        self.last_attempt_at = now_rfc3339()
        compiled = self._compile(seen)
        if compiled is None:  # written to while being read: this is no set
            log.info("policy files changed while they were read; waiting for them to settle")
            self._settler.restart(self._fingerprint(), time.monotonic())
            return False
        policy_set, errors = compiled
        if policy_set is None:
            self._settler.done(seen)  # the same broken files are not tried again; the next change is
            self._refuse(errors)
            return False
        if policy_set.revision == self.current.revision:
            self._settler.done(seen)
            self.last_errors = []
            return False
        diff = diff_sets(self.current, policy_set, self.shown)
        if not self._report({"applied": True, **diff}):
            # a policy change that cannot be recorded is not made; it is tried again after it settles
            self._settler.restart(seen, time.monotonic())
            self.last_errors = [Diagnostic("audit-failed", "the reload could not be written to the audit log; "
                                           f"keeping revision {self.current.revision}", self.shown(self._where))]
            return False
        self._settler.done(seen)
        removed = diff["rules_removed"] or diff["files_removed"]
        (log.warning if removed else log.info)(
            "policies reloaded: revision %s -> %s; rules +%d -%d ~%d%s%s", diff["old_revision"], diff["revision"],
            len(diff["rules_added"]), len(diff["rules_removed"]), len(diff["rules_changed"]),
            f"; rules removed: {', '.join(diff['rules_removed'])}" if diff["rules_removed"] else "",
            f"; files removed: {', '.join(diff['files_removed'])}" if diff["files_removed"] else "")
        self.current = policy_set
        self.loaded_at = now_rfc3339()
        self.last_errors = []
        gc.freeze()
        return True

    def _refuse(self, errors: list[Diagnostic]) -> None:
        self.last_errors = [dataclasses.replace(d, file=self.shown(d.file), message=self._scrub(d.message),
                                                hint=d.hint and self._scrub(d.hint)) for d in errors]
        for d in self.last_errors:
            log.error("policy reload refused, keeping revision %s: %s", self.current.revision, d.format())
        self._report({"applied": False, "revision": self.current.revision,
                      "errors": [d.to_dict() for d in self.last_errors]})

    def _report(self, details: dict[str, Any]) -> bool:
        """Tell ``on_reload``; False when it failed (the audit log could not be written)."""
        if self.on_reload is None:
            return True
        try:
            # A reload belongs to no request: no trace id.
            self.on_reload({**audit_head(RELOAD_EVENT, now_rfc3339(), None), **details})
        except Exception as exc:  # the audit log's failure, whatever its kind: logged, never a crashed watcher
            log.error("could not record a policy reload: %s", exc)
            return False
        return True

    # --- running and showing ------------------------------------------------------------------------

    def partial_set_risk(self) -> str | None:
        """Why a deploy could load half a set, for a warning at start; None with a manifest, or when every
        policy path changes in one rename (a Kubernetes ConfigMap or Secret)."""
        if self.manifest is not None:
            return None
        loose = [self.shown(str(p)) for p in self.paths if not swapped_whole(p)]
        if not loose:
            return None
        return (f"policies reload without a manifest ({', '.join(loose)}): a deploy that pauses for more than "
                f"reload.settle ({self.settle:g}s) while it writes the policy files loads the files written so far, "
                "rules missing. Make `gateway check --config CONFIG --write-manifest` the last step of every "
                "deploy and set reload.manifest (docs/deploy.md, \"Deploying policies\"), or mount the policies "
                "as a Kubernetes ConfigMap")

    async def watch(self, interval: float) -> None:
        """Look every ``interval`` and load settled changes, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                # stat and compile are blocking work of a few ms; keep them off the event loop
                if await asyncio.to_thread(self.poll):
                    for listener in self.swap_listeners:
                        listener()
            except Exception:  # a bug here must not stop watching for good; the last good set stays
                log.exception("policy watcher failed; keeping revision %s", self.current.revision)

    def shown(self, file: str) -> str:
        """A file path as API callers and the audit log see it (never absolute)."""
        return display_path(file, self.base, self.paths)

    def _scrub(self, text: str) -> str:
        """``text`` with the host paths of the policy roots and the config directory written as shown."""
        for root in sorted(self.paths, key=lambda p: len(str(p)), reverse=True):
            text = text.replace(str(root), self.shown(str(root)))
        if self.base is not None:
            text = text.replace(f"{self.base}/", "").replace(str(self.base), ".")
        return text

    def status(self) -> dict[str, object]:
        """For `GET /v1/policies`: nothing in it names a path on the host."""
        summary = self.current.summary()
        return {**summary, "files": [self.shown(f) for f in summary["files"]], "loaded_at": self.loaded_at,
                "last_attempt_at": self.last_attempt_at, "pending": self._settler.pending,
                "manifest": self.shown(str(self.manifest)) if self.manifest else None,
                "errors": [d.to_dict() for d in self.last_errors]}
