"""Per-decision latency of the policy engine as the policy set grows.

Generates policy sets of 10, 100 and 1,000 rules spread over several files, in which one tool
(``payments_transfer``) matches exactly 1 or exactly 5 rules and every other rule names other
tools. For each (engine, rules, matching) it times ``PolicySet.decide`` call by call and prints
p50, p99 and decisions per second, the 1,000-rule / 10-rule p50 ratio (near 1 means non-matching
rules cost nothing per call), and PASS / MISS against the spec's latency targets.

The **flow** case (issue 21) is the 1-matching set of 1,000 rules plus one ``sum`` tally and one ``label``
rule over ``payments_transfer``, decided for a call whose run already carries labels, tallies and history;
each sample is the decision and the tally change an admission computes. The **tally** case is the same with the
label rule over other tools (web fetches, at the response stage), so only the tally adds to the call's work.
Both are measured in the same rounds as the plain 1-matching case, and their p50 is printed beside that one's
with the ratio (the target: at most 1.2 times). The flow case's label rule is a second rule the call evaluates,
so its line also gives what a second matching rule alone costs (the plain 2-matching case), for scale.

    python bench/decision.py [--engine NAME] [--quick] [--json]

Run it from the repository root so that ``import gateway`` works. See bench/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

# `python bench/decision.py` puts bench/ first on sys.path, where bench/gateway.py (another
# benchmark) would shadow the `gateway` package; the repository root must come first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.core.errors import PolicyLoadError
from gateway.policy import (
    Outcome,
    PolicySet,
    Principal,
    SessionInfo,
    ToolCall,
    ToolInfo,
    Verdict,
    load_policy_set,
)
from gateway.policy.cel import get_engine

ENGINES = ("cel-expr-python", "cel-python")
RULE_COUNTS = (10, 100, 1_000)
MATCHING_COUNTS = (1, 2, 5)
FILES_PER_SET = {10: 2, 100: 4, 1_000: 10}

# Issue 12's targets for the default engine among 1,000 rules: p50 in µs by matching rules
# (the spec's were 30 and 100).
TARGET_RULES = 1_000
TARGET_P50_US = {1: 15.0, 5: 40.0}
# Issue 21's target: a decision with a tally and a label rule costs at most this many times the plain one.
FLOW_RULES = 1_000
FLOW_MATCHING = 1
FLOW_TARGET_RATIO = 1.2

# (warm-up, measured) decisions per configuration. The pure-Python engine is far slower, so it
# gets fewer; each engine's measuring also stops at a time budget so the script stays near a
# minute on two cores whatever the engine's speed (the table shows how many samples were taken).
ITERATIONS = {"cel-expr-python": (1_000, 20_000), "cel-python": (20, 1_000)}
QUICK_ITERATIONS = (20, 300)
BUDGET_S = {"cel-expr-python": 30.0, "cel-python": 15.0}
QUICK_BUDGET_S = 3.0
# Decisions per configuration per round; the budget is checked between rounds.
CHUNK = {"cel-expr-python": 250, "cel-python": 5}

TOOL = "payments_transfer"
SERVICES = ("crm", "github", "jira", "slack", "s3", "search", "calendar", "email", "db", "k8s", "hr",
            "docs", "analytics", "billing", "tickets", "wiki")
OBJECTS = ("contact", "issue", "repo", "message", "bucket", "event", "record", "pod", "invoice", "page",
           "user", "report")
VERBS = ("get", "list", "create", "update", "delete", "search", "export", "archive")
OTHER_PAYMENTS = ("payments_refund_create", "payments_refund_list", "payments_payout_get",
                  "payments_invoice_void", "payments_balance_get")

# ---------------------------------------------------------------------------------------------
# The benchmarked call and the rules it matches, with what each must do (checked once per set).

CALL = ToolCall(
    ToolInfo(TOOL, upstream="payments", annotations={"destructiveHint": True}),
    {"amount": 12_500, "currency": "EUR", "memo": "invoice 2024-117",
     "destination": {"iban": "DE89370400440532013000", "country": "DE"}, "debug": True},
    principal=Principal("alice@example.com", ("finance", "payments-ops"), {"tenant": "acme"}),
    session=SessionInfo("sess-42", calls=12, calls_by_tool={TOOL: 2}, rejected=0,
                        started_at="2025-01-01T00:00:00Z"),
    env={"stage": "production", "region": "eu-west-1"},
)

_APPROVE = {
    "id": "large-transfer-needs-approval",
    "tools": [TOOL, "payments_refund_*"],
    "when": 'variables.amount_usd > 10000.0 && !("finance-leads" in principal.groups)',
    "action": "approve",
    "message": "Transfers above 10,000 USD need approval.",
    "messageExpression": '"Transfer of " + string(args.amount) + " " + args.currency + " by "'
                         ' + principal.id + " needs approval"',
    "approval": {"approvers": ["group:finance-leads"], "timeout": "15m"},
}
_ALLOW = {"id": "allow-finance", "tools": ["payments_*"],
          "when": '"finance" in principal.groups && principal.claims.tenant == "acme"', "action": "allow"}
_REWRITE = {"id": "tag-reference", "tools": [TOOL], "action": "rewrite",
            "rewrite": {"set": {"reference": 'has(args.reference) ? args.reference : "auto-" + session.id'},
                        "remove": ["debug"]}}
_SANCTIONS = {"id": "sanctioned-destination", "tools": [TOOL, "payments_payout_*"],
              "when": 'args.destination.country in ["KP", "IR", "SY", "CU"]', "action": "reject",
              "messageExpression": '"Transfers to " + args.destination.country + " are not allowed"'}
# A regular expression over every string argument (bench/gateway.py's policy has the same): matches() costs.
_SECRETS = {"id": "no-secrets-in-any-argument", "tools": ["payments_*"], "action": "reject",
            "when": 'args.exists(k, type(args[k]) == string && args[k].matches("(?i)password|AKIA[0-9A-Z]{16}"))',
            "message": "Do not send secrets to tools."}
_BUDGET = {"id": "call-budget", "tools": ["payments_*", "github_repo_delete"],
           "when": "session.calls >= 200 || session.rejected >= 10", "action": "terminate",
           "message": "The tool-call budget for this run is spent."}

# matching rules → ([(file key, rule)], {rule id: expected outcome}, expected verdict)
MATCHING: dict[int, tuple[list[tuple[str, dict[str, Any]]], dict[str, Outcome], str]] = {
    1: ([("payments", _APPROVE)], {"payments/large-transfer-needs-approval": Outcome.FIRED}, "approve"),
    2: ([("payments", _APPROVE), ("guards", _SECRETS)],
        {"payments/large-transfer-needs-approval": Outcome.FIRED,
         "guards/no-secrets-in-any-argument": Outcome.NOT_FIRED},
        "approve"),
    5: ([("payments", _ALLOW), ("payments", _APPROVE), ("payments", _REWRITE), ("payments", _SANCTIONS),
         ("guards", _BUDGET)],
        {"payments/allow-finance": Outcome.FIRED, "payments/large-transfer-needs-approval": Outcome.FIRED,
         "payments/tag-reference": Outcome.FIRED, "payments/sanctioned-destination": Outcome.NOT_FIRED,
         "guards/call-budget": Outcome.NOT_FIRED}, "approve"),
}

# The flow case: one sum tally and one label rule over the benchmarked tool, added to the 1-matching set. The
# label rule reads the run's tally and labels, so the call's session (with labels, tallies and history) is built
# and bound as the pipeline builds it for a run that has already moved money.
_TALLY = {"id": "transferred", "description": "What the run has moved, in the request's currency.",
          "tools": [TOOL, "payments_refund_*"], "sum": "double(args.amount)"}
_LABEL = {"id": "large-mover", "tools": [TOOL], "action": "label",
          "when": 'session.tallies.transferred + double(args.amount) > 10000.0 && !("reviewed" in session.labels)',
          "labels": ["large-mover"]}
# The tally case's label rule: the pack's kind, over other tools, so it adds nothing to the benchmarked call.
_LABEL_ELSEWHERE = {"id": "web-content-is-untrusted", "tools": ["web_*", "mail_read"], "stage": "response",
                    "action": "label", "labels": ["untrusted"]}
FLOW_CASES = {"flow": _LABEL, "tally": _LABEL_ELSEWHERE}
# The verdicts whose call is counted: those of an approved call at its release (the benchmarked call is held for
# approval), so every sample computes the tally change as an admission does.
COUNTED = frozenset({Verdict.ALLOW, Verdict.APPROVE})
FLOW_CALL = replace(CALL, session=SessionInfo(
    "sess-42", calls=12, calls_by_tool={TOOL: 2}, rejected=0, started_at="2025-01-01T00:00:00Z",
    labels=["untrusted", "pii"], tallies={"transferred": 900.0}, seen={},
    history=[{"tool": TOOL if i % 4 == 0 else "crm_contact_get", "verdict": "allow", "rule": "",
              "labels": ["pii"] if i == 1 else [], "time": f"2025-01-01T00:{i:02d}:00Z"} for i in range(12)]))
# flow case → (the rules the call evaluates, the labels it gives)
FLOW_EXPECTED = {
    "flow": ({"payments/large-transfer-needs-approval": Outcome.FIRED, "payments/large-mover": Outcome.FIRED},
             ("large-mover",)),
    "tally": ({"payments/large-transfer-needs-approval": Outcome.FIRED}, ()),
}


# ---------------------------------------------------------------------------------------------
# Policy generation


def _other_rule(i: int) -> dict[str, Any]:
    """The i-th rule that never matches ``TOOL``: exact names and globs over other tools."""
    # A bijection of i over every (service, object, verb), so that each rule names its own tool.
    space = len(SERVICES) * len(OBJECTS) * len(VERBS)
    j = (i * 7919) % space
    svc, obj = SERVICES[j % len(SERVICES)], OBJECTS[(j // len(SERVICES)) % len(OBJECTS)]
    verb = VERBS[j // (len(SERVICES) * len(OBJECTS))]
    tool = f"{svc}_{obj}_{verb}"
    kind = i % 8
    rid = f"r{i:04d}"
    if kind == 0:
        return {"id": f"{rid}-allow-group", "tools": [tool], "action": "allow",
                "when": f'"{svc}-users" in principal.groups'}
    if kind == 1:
        return {"id": f"{rid}-reject-archived", "tools": [f"{svc}_{obj}_*"], "action": "reject",
                "when": 'has(args.status) && args.status == "archived"',
                "message": f"Archived {obj}s are read-only."}
    if kind == 2:
        return {"id": f"{rid}-approve-bulk", "tools": [tool, f"{svc}_{obj}_export", OTHER_PAYMENTS[i % 5]],
                "action": "approve", "when": "variables.bulk && !variables.is_admin",
                "messageExpression": f'"Bulk {verb} of " + string(args.count) + " {obj}s needs approval"',
                "approval": {"approvers": [f"group:{svc}-admins"], "timeout": "30m"}}
    if kind == 3:
        return {"id": f"{rid}-cap-limit", "tools": [tool], "action": "rewrite",
                "rewrite": {"set": {"limit": "has(args.limit) && args.limit < 100 ? args.limit : 100"}}}
    if kind == 4:
        return {"id": f"{rid}-per-tool-budget", "tools": [tool], "action": "terminate",
                "when": f'"{tool}" in session.calls_by_tool && session.calls_by_tool["{tool}"] > 25'}
    if kind == 5:
        return {"id": f"{rid}-dry-run-deletes", "tools": ["*_delete", f"{svc}_*_archive"], "action": "skip",
                "when": 'env.stage == "staging"', "result": {"deleted": False, "note": "skipped by policy"}}
    if kind == 6:
        return {"id": f"{rid}-no-system-paths", "tools": [f"{svc}_*"], "action": "reject",
                "when": 'has(args.path) && glob(args.path, "/etc/*")',
                "messageExpression": '"Path " + args.path + " is off limits"'}
    return {"id": f"{rid}-tenant-scope", "tools": [tool, f"{svc}_{obj}_get"], "action": "reject",
            "when": "has(args.tenant) && args.tenant != principal.claims.tenant",
            "message": "Calls may only touch the caller's tenant."}


_OTHER_VARIABLES = [
    {"name": "is_admin", "expression": '"admins" in principal.groups'},
    {"name": "bulk", "expression": "has(args.count) && int(args.count) > 500"},
]
_PAYMENT_VARIABLES = [
    {"name": "amount_usd", "expression": 'double(args.amount) * (args.currency == "EUR" ? 1.1 : 1.0)'},
    *_OTHER_VARIABLES,
]


def write_policy_set(directory: Path, total: int, matching: int, flow: str = "") -> list[Path]:
    """Write ``total`` rules over several files, ``matching`` of which apply to ``TOOL`` (with ``flow``, a key of
    ``FLOW_CASES``: and that case's label rule and the tally, in the payments file)."""
    placed, _, _ = MATCHING[matching]
    if flow:
        placed = [*placed, ("payments", FLOW_CASES[flow])]
    files = FILES_PER_SET[total]
    keys = ["payments", "guards"] + [f"team-{k:02d}" for k in range(files - 2)]
    rules: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    for key, rule in placed:
        rules[key].append(rule)
    for i in range(total - len(placed)):
        rules[keys[i % files]].append(_other_rule(i))
    paths = []
    for key in keys:
        doc: dict[str, Any] = {"policy": key, "description": f"Generated for the decision benchmark ({key}).",
                               "default": "reject",
                               "variables": _PAYMENT_VARIABLES if key == "payments" else _OTHER_VARIABLES}
        if flow and key == "payments":
            doc["tallies"] = [_TALLY]
        doc["rules"] = rules[key]
        path = directory / f"{key}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# Measurement


@dataclass
class Row:
    """One measured configuration."""

    engine: str
    rules: int
    matching: int
    files: int
    load_ms: float
    samples: int
    flow: str  # "" for the plain cases, else a key of FLOW_CASES
    p50_us: float
    p99_us: float
    mean_us: float
    decisions_per_s: float


@dataclass
class Config:
    """One loaded policy set and the samples taken from it so far."""

    engine: str
    rules: int
    matching: int
    files: int
    load_ms: float
    policy_set: PolicySet
    samples: list[int]
    flow: str = ""

    def step(self) -> Callable[[], object]:
        """One measured decision: ``decide`` (with ``flow``: and the tally change an admission computes)."""
        if not self.flow:
            decide = self.policy_set.decide
            return lambda: decide(CALL)
        return lambda: flow_step(self.policy_set)


def check_decision(policy_set: PolicySet, matching: int) -> str | None:
    """Why the benchmarked call does not evaluate exactly the intended rules, or None."""
    _, expected, verdict = MATCHING[matching]
    decision = policy_set.decide(CALL)
    got = {r.rule: r.outcome for r in decision.rules}
    if got != expected:
        shown = {k: str(v) for k, v in got.items()}
        return f"expected {len(expected)} rules {sorted(expected)}, decision evaluated {len(got)}: {shown}"
    if str(decision.verdict) != verdict:
        return f"expected verdict {verdict}, got {decision.verdict} ({decision.message})"
    if CALL.args.get("debug") is not True:
        return "decide() changed the caller's arguments in place"
    return None


def flow_step(policy_set: PolicySet) -> tuple[Any, Any]:
    """The flow case's work per call: the decision, then what the call adds to the tallies (on the final args)."""
    return policy_set.decide_counted(FLOW_CALL, COUNTED)


def check_flow(policy_set: PolicySet, flow: str) -> str | None:
    """Why a flow case does not decide, label and count as intended, or None."""
    decision, change = flow_step(policy_set)
    expected, labels = FLOW_EXPECTED[flow]
    got = {r.rule: r.outcome for r in decision.rules}
    if got != expected:
        return f"expected rules {sorted(expected)}, decision evaluated {len(got)}: {got}"
    if str(decision.verdict) != "approve" or tuple(decision.labels) != labels:
        return f"expected approve with the labels {labels}, got {decision.verdict} with {decision.labels}"
    if dict(change.sums) != {"transferred": 12_500.0} or change.distinct:
        return f"expected the change transferred +12500.0, got {change.to_json()}"
    return None


def load_config(engine: str, total: int, matching: int, flow: str = "") -> Config:
    """Generate and load one policy set, and check that the call evaluates the intended rules."""
    with tempfile.TemporaryDirectory(prefix="bench-decision-") as tmp:
        paths = write_policy_set(Path(tmp), total, matching, flow)
        started = time.perf_counter()
        try:
            policy_set = load_policy_set(paths, engine=engine)
        except PolicyLoadError as exc:
            raise BenchmarkError(f"{engine} cannot load the generated policies: {exc.diagnostics[0].format()}") from exc
        load_ms = (time.perf_counter() - started) * 1e3
    if len(policy_set.rules) != total:
        raise BenchmarkError(f"{engine}: loaded {len(policy_set.rules)} rules, generated {total}")
    problem = check_flow(policy_set, flow) if flow else check_decision(policy_set, matching)
    if problem:
        raise BenchmarkError(f"{engine}, {total} rules, {matching} matching{' + ' + flow if flow else ''}: {problem}")
    return Config(engine, total, matching, len(paths), load_ms, policy_set, [], flow)


def measure(configs: Sequence[Config], warmup: int, iterations: int, budget_s: float, chunk: int) -> None:
    """Time ``iterations`` decisions per config, one sample per call, in interleaved rounds.

    Round-robin chunks spread any background load on the machine over every configuration
    alike, so the ratios between them stay fair even when the absolute figures are noisy.
    """
    clock = time.perf_counter_ns
    steps = [config.step() for config in configs]
    for step in steps:
        for _ in range(warmup):
            step()
    gc.collect()  # start from a settled heap; GC stays enabled, as in the service
    deadline = clock() + int(budget_s * 1e9)
    while any(len(c.samples) < iterations for c in configs) and clock() < deadline:
        for config, step in zip(configs, steps, strict=True):
            samples = config.samples
            for _ in range(min(chunk, iterations - len(samples))):
                started = clock()
                step()
                samples.append(clock() - started)


def percentile(ordered: Sequence[int], q: float) -> float:
    """Nearest-rank percentile of sorted samples."""
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


def summarize(config: Config) -> Row:
    """The figures for one configuration's samples."""
    ordered = sorted(config.samples)
    mean_ns = sum(ordered) / len(ordered)
    return Row(config.engine, config.rules, config.matching, config.files, round(config.load_ms, 1),
               len(ordered), config.flow, round(percentile(ordered, 0.50) / 1e3, 2),
               round(percentile(ordered, 0.99) / 1e3, 2), round(mean_ns / 1e3, 2), round(1e9 / mean_ns))


def run_engine(engine: str, quick: bool) -> list[Row]:
    """Load every configuration for ``engine``, then measure them together."""
    configs = [load_config(engine, total, matching) for total in RULE_COUNTS for matching in MATCHING_COUNTS]
    configs.extend(load_config(engine, FLOW_RULES, FLOW_MATCHING, flow) for flow in FLOW_CASES)
    warmup, iterations = QUICK_ITERATIONS if quick else ITERATIONS[engine]
    measure(configs, warmup, iterations, QUICK_BUDGET_S if quick else BUDGET_S[engine], CHUNK[engine])
    return [summarize(c) for c in configs]


class BenchmarkError(Exception):
    """The benchmark would measure the wrong thing (wrong rules matched, wrong outcome)."""


def available(engine: str) -> str | None:
    """Why ``engine`` cannot run here, or None when it can."""
    try:
        get_engine(engine)
    except Exception as exc:  # a missing or half-written engine module: note it and move on
        return f"{type(exc).__name__}: {exc}"
    return None


# ---------------------------------------------------------------------------------------------
# Report


def ratios(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """p50 at the largest set over p50 at the smallest, per engine and matching count."""
    by_key = {(r.engine, r.rules, r.matching): r for r in rows if not r.flow}
    out = []
    for engine in dict.fromkeys(r.engine for r in rows):
        for matching in MATCHING_COUNTS:
            big, small = by_key.get((engine, RULE_COUNTS[-1], matching)), by_key.get((engine, RULE_COUNTS[0], matching))
            if big and small:
                out.append({"engine": engine, "matching": matching, "rules": [small.rules, big.rules],
                            "p50_ratio": round(big.p50_us / small.p50_us, 2)})
    return out


def targets(rows: Sequence[Row], default_engine: str) -> list[dict[str, Any]]:
    """The p50 targets for the default engine, each PASS or MISS."""
    out = []
    for row in rows:
        at_target = row.engine == default_engine and row.rules == TARGET_RULES and row.matching in TARGET_P50_US
        if at_target and not row.flow:
            limit = TARGET_P50_US[row.matching]
            out.append({"engine": row.engine, "rules": row.rules, "matching": row.matching, "p50_us": row.p50_us,
                        "target_us": limit, "result": "PASS" if row.p50_us <= limit else "MISS"})
    return out


def flow_ratios(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per engine: the flow case's p50 beside the plain case's (same rules, same rounds), PASS or MISS."""
    plain = {r.engine: r for r in rows if not r.flow and r.rules == FLOW_RULES and r.matching == FLOW_MATCHING}
    # what a second matching rule alone costs (the flow case's label rule is one), for scale
    second = {r.engine: r for r in rows if not r.flow and r.rules == FLOW_RULES and r.matching == 2}
    out = []
    for row in rows:
        base = plain.get(row.engine)
        if row.flow and base:
            ratio = round(row.p50_us / base.p50_us, 2)
            two = second.get(row.engine)
            out.append({"engine": row.engine, "case": row.flow, "rules": row.rules, "matching": row.matching,
                        "p50_us": row.p50_us, "plain_p50_us": base.p50_us, "ratio": ratio,
                        "second_rule_ratio": round(two.p50_us / base.p50_us, 2) if two else None,
                        "target_ratio": FLOW_TARGET_RATIO, "result": "PASS" if ratio <= FLOW_TARGET_RATIO else "MISS"})
    return out


def print_table(rows: Sequence[Row], ratio_rows: Sequence[dict[str, Any]], target_rows: Sequence[dict[str, Any]],
                flow_rows: Sequence[dict[str, Any]], default_engine: str, load: Sequence[float]) -> None:
    """The human-readable report."""
    print(f"{'engine':<16} {'rules':>6} {'matching':>8} {'p50 µs':>9} {'p99 µs':>9} {'decisions/s':>12} "
          f"{'samples':>8} {'load ms':>8}")
    for r in rows:
        matching = f"{r.matching}+{r.flow}" if r.flow else str(r.matching)
        print(f"{r.engine:<16} {r.rules:>6} {matching:>8} {r.p50_us:>9.1f} {r.p99_us:>9.1f} "
              f"{r.decisions_per_s:>12,} {r.samples:>8} {r.load_ms:>8.0f}")
    print(f"(load average before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs)")
    print()
    for x in ratio_rows:
        print(f"{x['engine']}, {x['matching']} matching: p50 at {x['rules'][1]:,} rules / p50 at "
              f"{x['rules'][0]} rules = {x['p50_ratio']:.2f}")
    if target_rows:
        print()
    for t in target_rows:
        print(f"{t['result']}  {t['engine']} (default engine), {t['rules']:,} rules, {t['matching']} matching: "
              f"p50 {t['p50_us']:.1f} µs, target ≤ {t['target_us']:.0f} µs")
    if not target_rows:
        print(f"\n(no targets checked: they apply to the default engine, {default_engine}, at {TARGET_RULES:,} rules)")
    if flow_rows:
        print()
    what = {"flow": "a tally and a label rule over the tool", "tally": "a tally over the tool, a label rule elsewhere"}
    for f in flow_rows:
        print(f"{f['result']}  {f['engine']}, {f['rules']:,} rules, {f['matching']} matching + {what[f['case']]}: "
              f"p50 {f['p50_us']:.1f} µs beside {f['plain_p50_us']:.1f} µs = {f['ratio']:.2f} times, "
              f"target ≤ {f['target_ratio']}" + (f" (a second matching rule alone: {f['second_rule_ratio']:.2f} times)"
                                                 if f["case"] == "flow" and f["second_rule_ratio"] else ""))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 2 when a policy set does not match the call as intended."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("all", *ENGINES), default="all",
                        help="CEL engine to measure (default: every engine that can be imported)")
    parser.add_argument("--quick", action="store_true", help="few iterations, for a smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args(argv)

    default_engine = get_engine("auto").name
    skipped = []
    engines = []
    for engine in ENGINES if args.engine == "all" else (args.engine,):
        reason = available(engine)
        if reason is None:
            engines.append(engine)
        else:
            skipped.append({"engine": engine, "reason": reason})
            print(f"note: skipping {engine}, it cannot be loaded ({reason})", file=sys.stderr)

    load_before = os.getloadavg()[0]
    rows = []
    try:
        for engine in engines:
            rows.extend(run_engine(engine, args.quick))
    except BenchmarkError as exc:
        print(f"error: the benchmark would measure the wrong thing: {exc}", file=sys.stderr)
        return 2

    load = (load_before, os.getloadavg()[0])
    ratio_rows, target_rows, flow_rows = ratios(rows), targets(rows, default_engine), flow_ratios(rows)
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "default_engine": default_engine,
                          "quick": args.quick, "cpus": os.cpu_count(), "load_average": load,
                          "results": [asdict(r) for r in rows], "ratios": ratio_rows,
                          "targets": target_rows, "flow": flow_rows, "skipped": skipped}, indent=2))
    else:
        print_table(rows, ratio_rows, target_rows, flow_rows, default_engine, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
