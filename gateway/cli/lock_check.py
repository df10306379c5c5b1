"""`gateway check --config C --lock tools.lock`: the tools listed now against the lock, for CI.

Each tool that drifted is an error at its entry in the lock, naming the fields that changed; a
description that changed is shown as a diff (invisible characters as escapes), so the reviewer
reads what the model would now read. A tool the lock holds that is no longer listed is a warning.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import ConfigError

__all__ = ["lock_drift", "shown"]

_HINT = "review the change; if it is wanted, rewrite the lock with `gateway tools --config {config} --lock > {lock}`"


def lock_drift(lock: str, config: Any) -> tuple[list[Diagnostic], list[str]]:
    """The diagnostics of the live tools (resources, prompts) against ``lock`` and the diff lines to show."""
    from gateway.cli.tools_command import live_pins
    from gateway.upstreams.pinning import KINDS, Pins, read_lock

    try:
        pins = read_lock(Path(lock))
    except ConfigError as exc:
        return list(exc.diagnostics), []
    listed, problems = live_pins(config)
    if listed is None:
        return problems, []
    allow_new = config.spec.tools_lock.allow_new if config.spec.tools_lock is not None else False
    checker = Pins(pins, lock, allow_new=allow_new, warn=False)
    lines = _entry_lines(Path(lock))
    hint = _HINT.format(config=config.file, lock=lock)
    found: list[Diagnostic] = []
    diff: list[str] = []
    for now in listed:
        drift = checker.judge(now)
        if drift is None:
            continue
        line = lines.get((KINDS[now.kind], now.name), 1)
        found.append(Diagnostic("tool-drift", drift.summary(), lock, line, 1, hint=hint))
        if drift.old_description is not None and drift.old_description != drift.new_description:
            diff.append(f"{lock}:{line}: {now.name} description:")
            diff.extend(_description_diff(drift.old_description, drift.new_description))
    seen = {(p.kind, p.name) for p in listed}
    found.extend(Diagnostic("tool-unlisted", f"pinned {kind.replace('_', ' ')} {name} is no longer listed by"
                            f" upstream {pin.upstream}", lock, lines.get((KINDS[kind], name), 1), 1,
                            severity=Severity.WARNING)
                 for (kind, name), pin in sorted(pins.items()) if (kind, name) not in seen)
    return found, diff


def _description_diff(old: str, new: str) -> list[str]:
    changed = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=1)
    return [f"    {shown(line)}" for line in list(changed)[2:]]  # without the ---/+++ file header


def shown(text: str) -> str:
    """``text`` with every character that does not print (controls, zero-width, bidi, tags) as an escape."""
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                   for c in text)


def _entry_lines(path: Path) -> dict[tuple[str, str], int]:
    """Each entry's line in the lock (of its ``name``) by (section, name), for the diagnostics."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    lines: dict[tuple[str, str], int] = {}
    for section, entries in root.value if isinstance(root, yaml.MappingNode) else []:
        for entry in entries.value if isinstance(entries, yaml.SequenceNode) else []:
            for key, value in entry.value if isinstance(entry, yaml.MappingNode) else []:
                if key.value == "name" and isinstance(value, yaml.ScalarNode):
                    lines[(str(section.value), str(value.value))] = key.start_mark.line + 1
    return lines
