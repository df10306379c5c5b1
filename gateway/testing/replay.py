"""Replay: decide recorded calls again under another policy set, and say what would change.

The input is the decision log (`call.outcome` events, see docs/gateway.md "The decision log"). Each
event that a policy decided carries a ``context`` with the rest of the request-stage input (tool
annotations, principal claims, session counters, call time, the env's digest), so the call can be
rebuilt as the policies saw it and decided again. Calls are replayed per run (principal and session), in
log order, with the run's labels, tallies and history rebuilt under the new set (gateway/testing/replay_runs.py),
and, given the config's usage windows, the principal's window tallies (gateway/testing/replay_windows.py).
Only the request stage is decided again: results are not in the log (their labels are). Values the log
redacted or summarised are not the values the policies saw, so a change that a rule reading them explains
is reported as "input redacted", not as a policy change.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.policy.call import CallInfo, Principal, SessionInfo, ToolCall, ToolInfo, UsageInfo
from gateway.policy.compile import CompiledRule
from gateway.policy.decision import Decision, Mode, Outcome
from gateway.policy.policyset import PolicySet, env_revision
from gateway.store.usage import window_minutes
from gateway.testing.replay_runs import RunFolder

__all__ = ["Change", "ReplayReport", "Shadow", "read_events", "replay"]

# How many example calls each group of changes keeps.
EXAMPLES_PER_CHANGE = 3

# Where a redacted JSON Pointer can sit, and the CEL variables whose value it changes.
_LOST_ROOTS: dict[str, frozenset[str]] = {
    "/original_args": frozenset({"args", "original_args"}),
    "/context/principal_claims": frozenset({"principal"}),
    "/context/tool": frozenset({"tool"}),
    "/context/session": frozenset({"session"}),
    "/context/call_time": frozenset({"call"}),
}

SKIP_NO_CONTEXT = "no policy decision recorded (refused before the policies, or an older log)"
SKIP_TRUNCATED = "input summarised in the log (larger than audit.max_value_bytes)"
SKIP_MALFORMED = "malformed event"


@dataclass
class Change:
    """One kind of difference (was → now, by which rules), with its count and a few examples."""

    kind: str  # "decision", "args" or "input_redacted"
    was: str
    now: str
    was_by: str | None
    now_by: str | None
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"kind": self.kind, "was": self.was, "now": self.now, "was_decided_by": self.was_by,
                "now_decided_by": self.now_by, "count": self.count, "examples": self.examples}


@dataclass
class Shadow:
    """An audit-mode rule: how often it would have acted, in the recording and under the new set."""

    rule: str
    action: str
    would_fire: int = 0  # under the new set
    recorded: int = 0  # in the log, under the set then in force
    errors: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"rule": self.rule, "action": self.action, "would_fire": self.would_fire,
                "recorded": self.recorded, "errors": self.errors, "examples": self.examples}


@dataclass
class ReplayReport:
    """Everything a replay found."""

    revision: str
    events: int = 0  # call.outcome events read
    replayed: int = 0
    unchanged: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    changes: dict[tuple[str, str, str, str | None, str | None], Change] = field(default_factory=dict)
    shadows: dict[str, Shadow] = field(default_factory=dict)
    env_mismatch: int = 0  # events recorded under another env than the one replayed with
    revisions: Counter[str] = field(default_factory=Counter)  # the recorded policy revisions
    bad_lines: list[int] = field(default_factory=list)
    runs: int = 0  # the runs (principal and session) the replayed calls belong to
    tallied: bool = False  # the new set declares tallies
    windows: list[str] = field(default_factory=list)  # the usage windows whose tallies were rebuilt

    @property
    def changed(self) -> int:
        """Calls whose decision or final arguments the new set changes (input loss not counted)."""
        return sum(c.count for c in self.changes.values() if c.kind != "input_redacted")

    @property
    def redacted_changes(self) -> int:
        """Calls that decide differently, but on input the log redacted: not evidence of a policy change."""
        return sum(c.count for c in self.changes.values() if c.kind == "input_redacted")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "revision": self.revision, "events": self.events, "replayed": self.replayed, "runs": self.runs,
            "windows_rebuilt": self.windows,
            "unchanged": self.unchanged, "changed": self.changed, "input_redacted": self.redacted_changes,
            "skipped": dict(self.skipped), "env_mismatch": self.env_mismatch,
            "recorded_revisions": dict(self.revisions), "bad_lines": self.bad_lines,
            "changes": [c.to_dict() for c in self._ordered()],
            "shadow": [s.to_dict() for s in self.shadows.values()],
        }

    def _ordered(self) -> list[Change]:
        return sorted(self.changes.values(), key=lambda c: (c.kind == "input_redacted", -c.count, c.was, c.now))

    def ordered_changes(self) -> list[Change]:
        """Changes, policy changes first, largest first."""
        return self._ordered()


def read_events(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number, event) for each non-empty line of a decision log; None for a line that is not an event."""
    with path.open("r", encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                yield number, None
                continue
            yield number, event if isinstance(event, dict) else None


def replay(policy_set: PolicySet, events: Iterable[tuple[int, dict[str, Any] | None]],
           env: dict[str, Any], usage_windows: Mapping[str, float] | None = None) -> ReplayReport:
    """Decide every replayable recorded call again under ``policy_set`` with ``env``; with ``usage_windows`` (the
    config's, name to seconds) the principals' window tallies are rebuilt too, else they are read as logged."""
    report = ReplayReport(policy_set.revision, tallied=bool(policy_set.tallies))
    actions = {r.id: str(r.action) for r in policy_set.rules}
    wanted_env = env_revision(env)
    runs = RunFolder(policy_set, window_minutes(usage_windows or {}))
    report.windows = sorted(runs.windows.windows) if report.tallied else []
    for number, event in events:
        if event is None:
            report.bad_lines.append(number)
            continue
        if event.get("event") != "call.outcome":
            continue
        report.events += 1
        _recorded_shadows(report, event, actions)
        context = event.get("context")
        if not isinstance(context, dict):
            report.skipped[SKIP_NO_CONTEXT] += 1
            continue
        if _truncated(event.get("original_args")) or _truncated(context):
            report.skipped[SKIP_TRUNCATED] += 1
            continue
        try:
            call = _call_of(event, context, env)
        except (TypeError, ValueError, KeyError, AttributeError):
            report.skipped[SKIP_MALFORMED] += 1
            continue
        report.replayed += 1
        report.revisions[str(event.get("revision"))] += 1
        if context.get("env_revision") != wanted_env:
            report.env_mismatch += 1
        call = runs.with_state(event, context, call)
        decision = runs.fold(event, context, call, policy_set.decide(call))
        _shadows(report, event, decision, actions)
        _compare(report, event, context, decision, policy_set)
    report.runs = len(runs.runs)
    return report


def _call_of(event: dict[str, Any], context: dict[str, Any], env: dict[str, Any]) -> ToolCall:
    """The request-stage input as the gateway built it, from the event and its context."""
    tool = context.get("tool") or {}
    principal = event.get("principal") or {}
    session = context.get("session") or {}
    args = event.get("original_args")
    if not isinstance(args, dict):
        raise ValueError("original_args is not an object")
    return ToolCall(
        tool=ToolInfo(name=str(event["tool"]), upstream=str(event.get("upstream") or ""),
                      title=str(tool.get("title") or ""), description=str(tool.get("description") or ""),
                      annotations=dict(tool.get("annotations") or {}), pinned=tool.get("pinned") is True,
                      schema_text=str(tool.get("schema_text") or "")),
        args=args,
        # kind and issuer as the event recorded them (events from before kind was recorded: an API key's)
        principal=Principal.from_record(principal, dict(context.get("principal_claims") or {})),
        session=SessionInfo(str(session.get("id") or ""), int(session.get("calls") or 0),
                            {str(k): int(v) for k, v in (session.get("calls_by_tool") or {}).items()},
                            int(session.get("rejected") or 0), str(session.get("started_at") or ""),
                            bool(session.get("implicit"))),
        call=CallInfo(str(event.get("call_id") or ""), int(event.get("iteration") or 0),
                      str(context.get("call_time") or "")),
        env=env,
        usage=_usage_of(context.get("usage")),
    )


def _usage_of(logged: Any) -> dict[str, UsageInfo]:
    """The principal's rolling windows as the event logged them (none when the config declared none)."""
    if not isinstance(logged, dict):
        return {}
    return {str(name): UsageInfo(int(w.get("calls") or 0),
                                 {str(k): int(v) for k, v in (w.get("calls_by_tool") or {}).items()},
                                 int(w.get("rejected") or 0), _numbers(w.get("tallies")), _lists(w.get("seen")))
            for name, w in logged.items() if isinstance(w, dict)}


def _numbers(logged: Any) -> dict[str, float | int]:
    """A logged map of tally values (a window's tallies are replayed as logged)."""
    if not isinstance(logged, dict):
        return {}
    return {str(k): v for k, v in logged.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _lists(logged: Any) -> dict[str, list[str]]:
    if not isinstance(logged, dict):
        return {}
    return {str(k): [str(x) for x in v] for k, v in logged.items() if isinstance(v, list)}


def _compare(report: ReplayReport, event: dict[str, Any], context: dict[str, Any], decision: Decision,
             policy_set: PolicySet) -> None:
    was, now = str(context.get("policy_verdict")), str(decision.verdict)
    was_by, now_by = context.get("policy_decided_by"), decision.decided_by
    redacted = [str(p) for p in _list(event.get("redacted"))]
    kind = None
    if was != now:
        kind = "decision"
    elif not any(p.startswith(("/original_args", "/final_args")) for p in redacted) \
            and decision.args != event.get("final_args"):
        kind = "args"  # compared only when neither side was redacted in the log
    if kind is None:
        report.unchanged += 1
        return
    lost = _lost(redacted)
    if lost and _explained_by(lost, event, decision, policy_set):
        kind = "input_redacted"
    key = (kind, was, now, was_by, now_by)
    change = report.changes.get(key)
    if change is None:
        change = report.changes[key] = Change(kind, was, now, was_by, now_by)
    change.count += 1
    if len(change.examples) < EXAMPLES_PER_CHANGE:
        example = _example(event, decision)
        if kind == "args":
            example |= {"final_args_was": event.get("final_args"), "final_args_now": decision.args}
        change.examples.append(example)


def _lost(redacted: list[str]) -> list[tuple[frozenset[str], str | None]]:
    """What the redacted pointers hide: the CEL variables, and the key below them (None: the whole value).

    A rule must read the variable and name the key somewhere in its expressions to be explained by
    the loss. The name is a textual check, so a rule that reaches a key another way (``args[k]`` in a
    loop) is reported as a change: the safe side for a gate.
    """
    lost: list[tuple[frozenset[str], str | None]] = []
    for pointer in redacted:
        for prefix, roots in _LOST_ROOTS.items():
            if pointer == prefix:
                lost.append((roots, None))
            elif pointer.startswith(prefix + "/"):
                key = pointer[len(prefix) + 1:].split("/", 1)[0].replace("~1", "/").replace("~0", "~")
                lost.append((roots, key))
    return lost


def _explained_by(lost: list[tuple[frozenset[str], str | None]], event: dict[str, Any], decision: Decision,
                  policy_set: PolicySet) -> bool:
    """Whether a rule that decides differently now reads a value the log redacted."""
    recorded = {r.get("rule"): r.get("outcome") for r in _list(event.get("rules"))
                if isinstance(r, dict) and r.get("stage", "request") == "request"}
    differing = {r.rule for r in decision.rules if recorded.get(r.rule) != str(r.outcome)}
    if decision.decided_by:
        differing.add(decision.decided_by)
    rules = {r.id: r for r in policy_set.rules}
    for rule in (rules[name] for name in differing if name in rules):
        for roots, word in lost:
            if rule.references & roots and (word is None or word in _sources(policy_set, rule)):
                return True
    return False


def _sources(policy_set: PolicySet, rule: CompiledRule) -> str:
    """The text of every expression the rule evaluates, its file variables included."""
    expressions = [rule.when, rule.message_expression, rule.result_expression,
                   *(expr for _, expr in (rule.rewrite.set if rule.rewrite else ()))]
    variables = [v.expression for v in policy_set.policies[rule.policy_index].variables
                 if v.name in rule.variables_read]
    return "\n".join(e.source for e in (*expressions, *variables) if e is not None)


def _recorded_shadows(report: ReplayReport, event: dict[str, Any], actions: dict[str, str]) -> None:
    for r in _list(event.get("rules")):
        if isinstance(r, dict) and r.get("outcome") == str(Outcome.AUDIT) and r.get("stage", "request") == "request":
            rule = str(r.get("rule"))
            shadow = report.shadows.get(rule)
            if shadow is None:
                shadow = report.shadows[rule] = Shadow(rule, actions.get(rule, str(r.get("action"))))
            shadow.recorded += 1


def _shadows(report: ReplayReport, event: dict[str, Any], decision: Decision, actions: dict[str, str]) -> None:
    for r in decision.rules:
        if r.mode is not Mode.AUDIT:
            continue
        shadow = report.shadows.get(r.rule)
        if shadow is None:
            shadow = report.shadows[r.rule] = Shadow(r.rule, actions.get(r.rule, str(r.action)))
        if r.outcome is Outcome.AUDIT:
            shadow.would_fire += 1
            if len(shadow.examples) < EXAMPLES_PER_CHANGE:
                shadow.examples.append(_example(event, decision) | {"message": r.message})
        elif r.outcome is Outcome.ERROR:
            shadow.errors += 1


def _example(event: dict[str, Any], decision: Decision) -> dict[str, Any]:
    principal = event.get("principal") or {}
    return {"call_id": event.get("call_id"), "time": event.get("time"), "tool": event.get("tool"),
            "principal": principal.get("id") if isinstance(principal, dict) else None,
            "args": event.get("original_args"), "message": decision.message,
            "input_redacted": [str(p) for p in _list(event.get("redacted")) if not str(p).startswith("/final_args")]}


def _truncated(value: Any) -> bool:
    """Whether the log summarised any part of ``value`` (``{"truncated": true, "sha256": …}``)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("truncated") is True and "sha256" in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _list(value: Any) -> list[Any]:
    """``value`` when it is a list; a log edited by hand may hold anything where a list belongs."""
    return value if isinstance(value, list) else []
