"""`gateway replay`: what would a new policy set have decided for the calls in a decision log?"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gateway.core.diagnostics import Severity
from gateway.policy.load import check_policies
from gateway.testing.replay import Change, ReplayReport, read_events, replay

__all__ = ["register"]

EXIT_CHANGED = 1  # decisions changed (without --allow-changes)
EXIT_UNUSABLE = 2  # the policies, config or log could not be read


def register(sub: Any, engine: Any, fmt: Any) -> None:
    """Add `gateway replay` to the subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "replay", help="decide the calls of a decision log again under other policies and show what changes")
    p.add_argument("--audit", required=True, metavar="AUDIT.jsonl", help="the decision log (audit.file)")
    p.add_argument("--policies", nargs="+", metavar="PATH",
                   help="the policy set to replay under (default: the --config's policies)")
    p.add_argument("--config", help="take env and the usage windows from this gateway config (as the gateway did)")
    p.add_argument("--allow-changes", action="store_true", help="exit 0 even when decisions changed")
    engine(p)
    fmt(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay; print the differences; exit 1 when decisions changed (unless --allow-changes)."""
    env: dict[str, Any] = {}
    windows: dict[str, float] = {}  # the usage windows: their tallies are rebuilt only with the config's
    policies: list[str | Path] = list(args.policies or [])
    if not policies and not args.config:
        print("gateway replay: error: give --policies, or --config to replay under the config's policies",
              file=sys.stderr)
        return EXIT_UNUSABLE
    if args.config:
        from gateway.config.load import check_config
        from gateway.core.durations import parse_duration

        config, problems = check_config(args.config)
        if config is None:
            for d in problems:
                print(d.format(), file=sys.stderr)
            return EXIT_UNUSABLE
        env = dict(config.spec.env)
        windows = {name: parse_duration(d) for name, d in config.spec.usage_windows.items()}
        policies = policies or list(config.policy_paths())
    policy_set, diagnostics = check_policies(policies, args.engine)
    if policy_set is None:
        for d in diagnostics:
            if d.severity is Severity.ERROR:
                print(d.format(), file=sys.stderr)
        return EXIT_UNUSABLE
    path = Path(args.audit)
    try:
        report = replay(policy_set, read_events(path), env, windows)
    except OSError as exc:
        print(f"{path}: error[unreadable]: cannot read the decision log: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(render(report))
    return EXIT_CHANGED if report.changed and not args.allow_changes else 0


def render(report: ReplayReport) -> str:
    """The person-readable report."""
    lines = [f"replayed {report.replayed} of {report.events} recorded calls under revision {report.revision}: "
             f"{report.changed} changed, {report.redacted_changes} differ on redacted input, "
             f"{report.unchanged} unchanged, in {report.runs} run(s)"]
    for reason, count in sorted(report.skipped.items()):
        lines.append(f"  not replayed: {count} ({reason})")
    if report.bad_lines:
        lines.append(f"  lines that are not events: {len(report.bad_lines)} (first at line {report.bad_lines[0]})")
    if report.windows:
        lines.append(f"  usage windows' tallies rebuilt: {', '.join(report.windows)}")
    elif report.tallied:
        lines.append("  usage windows' tallies as logged (pass the gateway's --config to rebuild them)")
    if report.env_mismatch:
        lines.append(f"  warning: {report.env_mismatch} call(s) were recorded under another env "
                     "(pass the gateway's --config)")
    for change in report.ordered_changes():
        lines.append("")
        lines.extend(_render_change(change))
    if report.shadows:
        lines.append("")
        lines.append("audit-mode rules (would have acted; not enforced):")
        for shadow in report.shadows.values():
            lines.append(f"  ~ {shadow.rule} [{shadow.action}]: would fire on {shadow.would_fire} of "
                         f"{report.replayed} calls (recorded: {shadow.recorded})"
                         + (f", {shadow.errors} error(s)" if shadow.errors else ""))
            lines.extend(f"      e.g. {_example(e)}" for e in shadow.examples)
    return "\n".join(lines)


def _render_change(change: Change) -> list[str]:
    what = {"decision": "", "args": " (final arguments differ)",
            "input_redacted": " (input redacted in the log: not counted as a change)"}[change.kind]
    head = f"{change.was} → {change.now}{what}: {change.count} call(s)"
    by = f"    was decided by {change.was_by or 'the default'}, now by {change.now_by or 'the default'}"
    return [head, by, *(f"    e.g. {_example(e)}" for e in change.examples)]


def _example(example: dict[str, Any]) -> str:
    args = _short(example.get("args"))
    who = f"{example.get('tool')} by {example.get('principal')} at {example.get('time')}"
    text = f"{example.get('call_id')} {who} {args}"
    if "final_args_now" in example:
        text += f"; final arguments {_short(example['final_args_was'])} → {_short(example['final_args_now'])}"
    if example.get("message"):
        text += f": {example['message']}"
    return text


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
