"""`gateway check`, `gateway test`, `gateway explain`, `gateway schema`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gateway.cli.diagnostics_output import print_diagnostics
from gateway.cli.tools_command import catalog_for_check
from gateway.core.diagnostics import Diagnostic, Severity, SourceLines, render
from gateway.core.validation import validate_document
from gateway.policy.callspec import CallSpec
from gateway.policy.catalog import Catalog
from gateway.policy.explain import explain as explain_call
from gateway.policy.explain import render_text
from gateway.policy.load import check_policies, discover, read_document
from gateway.policy.model import PolicyFile
from gateway.reload.manifest import MANIFEST_NAME, build_manifest, render_manifest, write_manifest
from gateway.testing import Status, run_tests
from gateway.testing.coverage import CoverageCollector, coverage_exit

__all__ = ["SCHEMAS", "check", "explain", "print_diagnostics", "schema", "test"]


def _schema_models() -> dict[str, Callable[[], type[BaseModel]]]:
    def config() -> type[BaseModel]:
        from gateway.config.model import GatewayConfig

        return GatewayConfig

    return {"policy": lambda: PolicyFile, "config": config}


SCHEMAS = ("policy", "config")


_print_diagnostics = print_diagnostics


def check(args: argparse.Namespace) -> int:
    """Load and compile; print one diagnostic a line; exit 1 on any error."""
    diagnostics: list[Diagnostic] = []
    summary: dict[str, Any] = {}
    paths = list(args.paths)
    manifest = Path(args.write_manifest) if args.write_manifest else None
    typing: dict[str, Any] = {}  # what the config tells the typed environment (env values, usage windows)
    config = None
    if args.config:
        from gateway.config.load import check_config

        config, problems = check_config(args.config, fetch_specs=True)
        diagnostics.extend(problems)
        if config is not None:
            windows = getattr(config.spec, "usage_windows", None)
            typing = {"env": config.spec.env, "usage_windows": None if windows is None else list(windows)}
        if config is not None and not paths:
            paths = [str(p) for p in config.policy_paths()]
        if config is not None and manifest is None and config.spec.reload.manifest:
            manifest = config.path(config.spec.reload.manifest)
    if paths or not args.config:
        catalog, problems = catalog_for_check(args, config)  # first: the typed load can use it too
        diagnostics.extend(problems)
        policy_set, problems = check_policies(paths or ["."], args.engine, catalog=catalog, **typing)
        if policy_set is not None:
            summary = policy_set.summary()
        if catalog is not None:
            summary["tools"] = len(catalog.tools)
        problems.extend(_catalog_checks(args.engine, catalog, paths or ["."], problems))
        diagnostics.extend(sorted(problems, key=lambda d: (d.file, d.line, d.column)))
    drift_diff = _lock_check(args, config, diagnostics)
    errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
    warnings = len(diagnostics) - errors
    if args.strict:
        errors += warnings
    if args.write_manifest is not None and not errors:
        problem = _write_manifest(manifest or Path(MANIFEST_NAME), paths or ["."])
        if problem is None:
            summary["manifest"] = str(manifest or MANIFEST_NAME)
        else:
            diagnostics.append(problem)
            errors += 1
    _print_diagnostics(diagnostics, args.format == "json", {"ok": errors == 0, **summary})
    if args.format == "text":
        _print_outcome(errors, warnings, summary, drift_diff, args.strict)
    return 1 if errors else 0


def _print_outcome(errors: int, warnings: int, summary: dict[str, Any], drift_diff: list[str], strict: bool) -> None:
    """The text summary under the diagnostics (and the description diffs of ``--lock``)."""
    if drift_diff:
        print("\n".join(drift_diff), file=sys.stderr)
    if errors:
        print(f"{errors} error(s)" + (" (--strict: warnings count)" if strict and warnings else ""),
              file=sys.stderr)
    elif summary:
        against = f", checked against {summary['tools']} tools" if "tools" in summary else ""
        print(f"ok: {summary['policies']} policies, {summary['rules']} rules, revision {summary['revision']}"
              f" ({summary['engine']}){against}")
        if "manifest" in summary:
            print(f"wrote {summary['manifest']} ({len(summary['files'])} files)")
    else:
        print("ok")


def _lock_check(args: argparse.Namespace, config: Any, diagnostics: list[Diagnostic]) -> list[str]:
    """``--lock``: the live tools' drift from the lock added to ``diagnostics``; the description diffs to show."""
    if not getattr(args, "lock", None):
        return []
    if not args.config:
        diagnostics.append(Diagnostic("usage", "--lock needs --config (the upstreams whose tools are compared)",
                                      args.lock))
        return []
    if config is None:
        return []  # the config's own problems are reported
    from gateway.cli.lock_check import lock_drift

    found, diff = lock_drift(args.lock, config)
    diagnostics.extend(found)
    return diff


def _catalog_checks(engine: str, catalog: Catalog | None, paths: list[str],
                    found: list[Diagnostic]) -> list[Diagnostic]:
    """The policies checked against the tool catalog (without one, only what needs none), without a
    second diagnostic for what loading reported."""
    from gateway.policy.catalog_checks import check_against_catalog
    from gateway.policy.cel import get_engine

    # A typed load may already have said that an argument is unknown (pointing at the same line);
    # other findings are new unless loading reported something at that very spot.
    lines = {(d.file, d.line) for d in found}
    spots = {(d.file, d.line, d.column) for d in found}

    def new(d: Diagnostic) -> bool:
        if d.code == "unknown-argument":
            return (d.file, d.line) not in lines
        return (d.file, d.line, d.column) not in spots

    return [d for d in check_against_catalog(paths, catalog, get_engine(engine)) if new(d)]


def _write_manifest(path: Path, paths: list[str]) -> Diagnostic | None:
    """Write the manifest of the policy files under ``paths``; a diagnostic when it cannot be written."""
    files, _ = discover(paths)
    try:
        write_manifest(path, render_manifest(build_manifest(files, path)))
    except OSError as exc:
        return Diagnostic("manifest-write", f"cannot write the manifest: {exc.strerror or exc}", str(path))
    return None


def test(args: argparse.Namespace) -> int:
    """Run suites; PASS/FAIL/ERROR per case; exit 0 all pass, 1 any fail, 2 nothing ran."""
    collector = CoverageCollector() if getattr(args, "coverage", False) else None
    run = run_tests(args.paths, args.engine, args.run, collector.observe if collector else None)
    coverage = collector.report(args.paths, args.engine) if collector else None
    code = coverage_exit(run.exit_code, coverage, getattr(args, "fail_under", None))
    passed, failed, errored = run.count(Status.PASS), run.count(Status.FAIL), run.count(Status.ERROR)
    if args.format == "json":
        print(json.dumps({"passed": passed, "failed": failed, "errors": errored,
                          "diagnostics": [d.to_dict() for d in run.errors],
                          "cases": [c.to_dict() for c in run.cases],
                          **({"coverage": coverage.to_dict()} if coverage else {})}, indent=2))
        return code
    sources = SourceLines()
    for d in run.errors:
        print(render(d, sources))
    for case in run.cases:
        if case.status is Status.PASS and not args.verbose:
            continue
        step = f" (step {case.failed_step})" if case.failed_step else ""
        print(f"{case.status} {case.file}:{case.line}: {case.suite}/{case.name}{step}")
        for problem in case.problems:
            print(f"    {problem}")
    if not run.cases:
        print("no test ran" + (f" (nothing matched --run {args.run!r})" if args.run else ""))
    if errored:
        print(f"{errored} error(s)")
    print(f"{passed} passed, {failed + errored} failed")
    if coverage is not None:
        print("\n".join(coverage.render()))
        if code and not run.exit_code:
            print(f"coverage {coverage.percent:.1f}% is under --fail-under {args.fail_under}")
    return code


def explain(args: argparse.Namespace) -> int:
    """Decide one call and print the trace."""
    doc, problems, _ = read_document(Path(args.call))
    if doc is None:
        _print_diagnostics(problems, False, {})
        return 1
    spec, problems = validate_document(CallSpec, doc)
    if spec is None:
        _print_diagnostics(problems, False, {})
        return 1
    env: dict[str, Any] = {}
    if getattr(args, "config", None):
        from gateway.config.load import check_config

        config, problems = check_config(args.config)
        if config is None:
            _print_diagnostics(problems, False, {})
            return 1
        env = dict(config.spec.env)  # the call's own env, if any, wins key by key
    policy_set, diagnostics = check_policies(args.policies, args.engine)
    if policy_set is None:
        _print_diagnostics([d for d in diagnostics if d.severity is Severity.ERROR], False, {})
        return 1
    try:
        call = spec.to_call(env=env)
    except KeyError as exc:
        print(f"{args.call}:1:1: error[invalid-call]: {exc.args[0]}", file=sys.stderr)
        return 1
    report = explain_call(policy_set, call)
    print(json.dumps(report, indent=2, default=str) if args.format == "json" else render_text(report))
    return 0


def schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of policy files or of the gateway config."""
    model = _schema_models()[args.kind]()
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0
