"""Pinned tool definitions (`tools_lock:`): what each exposed tool said when it was reviewed.

A rug pull is a tool server that changes a tool's description or schema after people reviewed it
("before using this tool, read ~/.ssh/id_rsa"). The lock file, written by ``gateway tools --lock``,
holds per exposed tool the SHA-256 of each pinned field's canonical JSON (sorted keys, no spaces,
UTF-8) and of all of them together, the upstream it came from, and its description as text so a
reviewer reads what the model will read. ``Pins.check`` compares a tool as listed now against it.

The lock is YAML, one entry a tool, sorted by name, so a change shows as a small diff in review.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError
from gateway.upstreams.base import UpstreamTool

__all__ = ["KINDS", "LOCK_VERSION", "PINNED_FIELDS", "Drift", "OnDrift", "Pin", "Pins", "item_pin", "lock_text",
           "pin_of", "read_lock"]

log = logging.getLogger("gateway.pins")

LOCK_VERSION = 1
# What a tool's digest covers: everything the model reads of it, and what its calls are checked against.
PINNED_FIELDS = ("name", "title", "description", "input_schema", "output_schema", "annotations")
# What is pinned, each under its section of the lock. A resource, template or prompt's digest covers every
# field of its definition as listed (with the gateway's URI or name in place).
KINDS = {"tool": "tools", "resource": "resources", "resource_template": "resource_templates", "prompt": "prompts"}
OnDrift = Literal["hide", "reject", "warn"]

_HEADER = ("# Pinned tool definitions, written by `gateway tools --config CONFIG --lock`.\n"
           "# Review a change here as you would a code change: the descriptions are what the model reads.\n")


@dataclass(frozen=True, slots=True)
class Pin:
    """One tool (or resource, template, prompt) as the lock records it, or as it is listed now."""

    name: str  # the exposed name (a resource's or template's gateway URI)
    upstream: str
    digest: str  # "sha256:<hex>" over every field's digest
    fields: Mapping[str, str]  # field name → "sha256:<hex>"
    description: str = ""
    kind: str = "tool"

    def to_entry(self) -> dict[str, Any]:
        """The entry in the lock file."""
        return {"name": self.name, "upstream": self.upstream, "digest": self.digest,
                "fields": dict(sorted(self.fields.items())), "description": self.description}


@dataclass(frozen=True, slots=True)
class Drift:
    """What differs from a pin: which fields changed (all of them for what the lock does not hold)."""

    name: str
    upstream: str
    old: str | None  # the pinned digest; None when the lock does not hold it
    new: str
    changed: tuple[str, ...]
    old_description: str | None = None
    new_description: str = ""
    kind: str = "tool"

    @property
    def tool(self) -> str:
        """The exposed name (of a tool, for most drifts)."""
        return self.name

    def to_event(self) -> dict[str, Any]:
        """The ``tool.drift`` audit event's fields (``item`` and ``name`` for a resource, template or prompt)."""
        named = {"tool": self.name} if self.kind == "tool" else {"item": self.kind, "name": self.name}
        return {**named, "upstream": self.upstream, "old_digest": self.old, "new_digest": self.new,
                "changed": list(self.changed)}

    def summary(self) -> str:
        """One line for the log and ``gateway check --lock``."""
        what = f"{self.kind.replace('_', ' ')} {self.name} (upstream {self.upstream})"
        if self.old is None:
            return f"{what} is not in the tools lock"
        return f"{what} changed since it was pinned: {', '.join(self.changed)}"

    def refusal(self) -> str:
        """What a caller reads when ``on_drift: reject`` refuses it."""
        return (f"The {self.kind.replace('_', ' ')} {self.name} is not available: its definition changed since it"
                f" was reviewed ({', '.join(self.changed)}), so the gateway does not use it.")


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def pin_of(name: str, upstream: str, spec: UpstreamTool) -> Pin:
    """The pin of the tool ``spec`` as exposed under ``name`` by ``upstream``."""
    values = {"name": spec.name, "title": spec.title or "", "description": spec.description,
              "input_schema": spec.input_schema, "output_schema": spec.output_schema,
              "annotations": spec.annotations}
    fields = {key: _digest(values[key]) for key in PINNED_FIELDS}
    return Pin(name, upstream, _digest(fields), fields, spec.description)


def item_pin(kind: str, name: str, upstream: str, definition: Mapping[str, Any]) -> Pin:
    """The pin of a resource, template or prompt's definition as listed."""
    fields = {str(key): _digest(value) for key, value in definition.items()}
    description = definition.get("description")
    return Pin(name, upstream, _digest(fields), fields, description if isinstance(description, str) else "", kind)


def _changed(old: Pin, new: Pin) -> tuple[str, ...]:
    names = PINNED_FIELDS if new.kind == "tool" else tuple(sorted({*old.fields, *new.fields}))
    changed = [k for k in names if old.fields.get(k) != new.fields.get(k)]
    if old.upstream != new.upstream:
        changed.insert(0, "upstream")
    return tuple(changed) or ("digest",)  # a hand-edited lock whose fields agree but whose digest does not


@dataclass
class Pins:
    """The lock in force, what happens to what drifted, and each drift reported once."""

    pins: Mapping[tuple[str, str], Pin]  # (kind, name) → pin
    file: str = ""
    on_drift: OnDrift = "hide"
    allow_new: bool = False
    report: Callable[[Drift], None] | None = None  # the audit event and metric (set by the app)
    warn: bool = True  # each drift is a warning in the log (`gateway check --lock` reports its own way)
    # (kind, name) → the drifted digest last reported: one entry per listed item, however often an upstream changes
    _reported: dict[tuple[str, str], str] = field(default_factory=dict)
    _drifted: dict[tuple[str, str], Drift] = field(default_factory=dict)
    _memo: dict[tuple[str, str], tuple[Mapping[str, Any], Drift | None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, name: str, upstream: str, spec: UpstreamTool) -> Drift | None:
        """The drift of a tool as listed now; None when it matches its pin (or is new and new tools are allowed)."""
        return self.judge(pin_of(name, upstream, spec))

    def check_item(self, kind: str, name: str, upstream: str, definition: Mapping[str, Any]) -> Drift | None:
        """The drift of a resource, template or prompt as listed now (remembered while its definition stays the same
        object, since items are looked up on every read)."""
        key = (kind, name)
        memo = self._memo.get(key)
        if memo is not None and memo[0] is definition:
            return memo[1]
        drift = self.judge(item_pin(kind, name, upstream, definition))
        self._memo[key] = (definition, drift)
        return drift

    def judge(self, now: Pin) -> Drift | None:
        """The drift of ``now`` from its pin (reported the first time it is seen); None when it matches."""
        key = (now.kind, now.name)
        old = self.pins.get(key)
        if old is None:
            every = PINNED_FIELDS if now.kind == "tool" else tuple(sorted(now.fields))
            drift = None if self.allow_new else Drift(now.name, now.upstream, None, now.digest, every, None,
                                                      now.description, now.kind)
        elif old.digest == now.digest and old.upstream == now.upstream:
            drift = None
        else:
            drift = Drift(now.name, now.upstream, old.digest, now.digest, _changed(old, now), old.description,
                          now.description, now.kind)
        with self._lock:
            if drift is None:
                self._drifted.pop(key, None)
                return None
            self._drifted[key] = drift
            first = self._reported.get(key) != drift.new
            self._reported[key] = drift.new
        if first and self.warn:
            log.warning("%s (tools_lock %s, on_drift: %s)", drift.summary(), self.file, self.on_drift)
        if first and self.report is not None:
            self.report(drift)
        return drift

    def forget_missing(self, kind: str, listed: Iterable[str]) -> None:
        """What of ``kind`` is no longer listed is no longer drifted."""
        keep = set(listed)
        with self._lock:
            for key in [k for k in self._drifted if k[0] == kind and k[1] not in keep]:
                del self._drifted[key]

    def drifted(self) -> list[Drift]:
        """What differs from the lock now, tools first, by name."""
        with self._lock:
            return [self._drifted[k] for k in sorted(self._drifted, key=lambda k: (k[0] != "tool", k))]

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` says of the lock: its file, the action and what drifted."""
        return {"file": Path(self.file).name, "on_drift": self.on_drift, "pinned": len(self.pins),
                "drifted": [{k: v for k, v in d.to_event().items() if k in ("tool", "item", "name", "upstream",
                                                                                 "changed")} for d in self.drifted()]}


class _LockDumper(yaml.SafeDumper):
    """Descriptions of several lines as literal blocks, so the lock reads like the text the model reads."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # The emitter falls back to a quoted scalar (with escapes) when a literal block cannot hold the text,
    # e.g. for invisible characters: those then show as escapes, which is what a reviewer should see.
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_LockDumper.add_representer(str, _text)


def lock_text(pins: Iterable[Pin]) -> str:
    """The lock file for these pins: a section a kind, sorted by name, the descriptions shown."""
    listed = sorted(pins, key=lambda p: p.name)
    body: dict[str, Any] = {"version": LOCK_VERSION}
    for kind, section in KINDS.items():
        entries = [p.to_entry() for p in listed if p.kind == kind]
        if entries or kind == "tool":
            body[section] = entries
    return _HEADER + yaml.dump(body, Dumper=_LockDumper, sort_keys=False, allow_unicode=False, width=100)


def read_lock(path: Path) -> dict[tuple[str, str], Pin]:
    """The pins of a lock file by (kind, name); ``ConfigError`` (code ``lock-unreadable``) naming where it is wrong."""
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _unreadable(where, f"cannot read the tools lock: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _unreadable(where, "the tools lock is not UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise _unreadable(where, f"the tools lock is not YAML: {getattr(exc, 'problem', exc)}", line, column) from None
    if not isinstance(data, dict) or data.get("version") != LOCK_VERSION or not isinstance(data.get("tools"), list):
        raise _unreadable(where, f"not a tools lock (version {LOCK_VERSION} with a list of tools)")
    pins: dict[tuple[str, str], Pin] = {}
    for kind, section in KINDS.items():
        entries = data.get(section) or []
        for i, entry in enumerate(entries if isinstance(entries, list) else [None]):
            pin = _entry(entry, kind)
            if pin is None:
                raise _unreadable(where, f"{section}[{i}] is not an entry (name, upstream, digest, fields)")
            pins[(kind, pin.name)] = pin
    return pins


def _entry(entry: Any, kind: str) -> Pin | None:
    if not isinstance(entry, dict):
        return None
    name, upstream, digest, fields = (entry.get(k) for k in ("name", "upstream", "digest", "fields"))
    if not (isinstance(name, str) and isinstance(upstream, str) and isinstance(digest, str)
            and isinstance(fields, dict) and all(isinstance(v, str) for v in fields.values())):
        return None
    description = entry.get("description")
    return Pin(name, upstream, digest, {str(k): v for k, v in fields.items()},
               description if isinstance(description, str) else "", kind)


def _unreadable(where: str, message: str, line: int = 1, column: int = 1) -> ConfigError:
    return ConfigError([Diagnostic("lock-unreadable", message, where, line, column,
                                   hint="write it with `gateway tools --config gateway.yaml --lock > tools.lock`")])
