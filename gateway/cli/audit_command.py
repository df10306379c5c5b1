"""`gateway audit verify FILE... [--key PUB]`: are the decision log's hash chains intact?

Exit 0 when every chain in the files is intact ("N events checked, chain intact"); 1 naming each line
(``file:line``) where one was changed, removed, inserted, reordered or truncated, or a checkpoint whose
signature does not verify; 2 when a file or the key cannot be read. docs/observability.md says how to read it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gateway.pipeline.audit_keys import CheckpointVerifier, load_verifier
from gateway.pipeline.audit_verify import ChainSummary, VerifyReport, verify

__all__ = ["register"]

EXIT_BROKEN = 1  # a chain is broken, or a signature does not verify
EXIT_UNUSABLE = 2  # a file or the key could not be read


def register(sub: Any) -> None:
    """Add `gateway audit verify` to the subcommands."""
    audit: argparse.ArgumentParser = sub.add_parser("audit", help="the decision log: check its hash chains")
    verbs = audit.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")
    check = verbs.add_parser("verify", help="check audit files against their hash chains and checkpoint signatures")
    check.add_argument("files", nargs="+", metavar="FILE",
                       help="audit files in any order: a file and those rotated from it (FILE.1, …), every worker's")
    check.add_argument("--key", metavar="PUBLIC.pem",
                       help="the Ed25519 public key of audit.sign: check every checkpoint's signature")
    check.add_argument("--partial", action="store_true",
                       help="accept chains whose first events are not in the files given (older files removed)")
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verify; print every problem and a summary of each chain."""
    verifier: CheckpointVerifier | None = None
    if args.key:
        try:
            verifier = load_verifier(Path(args.key).read_bytes())
        except (OSError, ValueError) as exc:
            print(f"gateway audit verify: error: --key {args.key}: {getattr(exc, 'strerror', None) or exc}",
                  file=sys.stderr)
            return EXIT_UNUSABLE
    try:
        report = verify([Path(f) for f in args.files], verifier, partial=args.partial)
    except OSError as exc:
        print(f"gateway audit verify: error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.format == "json":
        print(json.dumps(_as_json(report), indent=2))
    else:
        for problem in report.shown:
            print(f"{problem.where}: {problem.kind}: {problem.message}")
        if len(report.shown) < len(report.problems):
            print(f"… and {len(report.problems) - len(report.shown)} more problems")
        for summary in report.chains:
            print(_chain_line(summary, report.keyed))
        print(_verdict(report))
    return 0 if report.ok else EXIT_BROKEN


def _chain_line(summary: ChainSummary, keyed: bool) -> str:
    text = (f"chain {summary.chain}: {summary.events} events (seq {summary.first_seq} to {summary.last_seq})"
            f" in {', '.join(summary.files)}; {'intact' if summary.intact else 'broken'}")
    if summary.checkpoints and not keyed:
        text += f"; {summary.checkpoints} checkpoints, signatures not checked (no --key)"
    elif keyed:
        after = summary.last_seq - summary.signed_through
        text += f"; {summary.signed} of {summary.checkpoints} checkpoints signed by the key"
        if summary.signed:
            text += f", the last at seq {summary.signed_through} ({after} events after it)"
    return text


def _verdict(report: VerifyReport) -> str:
    chains = len(report.chains)
    broken = sum(not c.intact for c in report.chains)
    head = f"{report.events} events checked, "
    if report.ok:
        return head + ("chain intact" if chains <= 1 else f"{chains} chains intact")
    if broken == 0:
        return head + f"{len(report.problems)} lines are not chained events"
    if chains == 1:
        return head + "chain broken"
    return head + f"{broken} of {chains} chains broken"


def _as_json(report: VerifyReport) -> dict[str, Any]:
    return {"ok": report.ok, "events": report.events,
            "chains": [{"chain": c.chain, "events": c.events, "first_seq": c.first_seq, "last_seq": c.last_seq,
                        "files": c.files, "intact": c.intact, "checkpoints": c.checkpoints, "signed": c.signed,
                        "signed_through": c.signed_through} for c in report.chains],
            "problems": [{"file": p.where.file, "line": p.where.line, "kind": p.kind, "message": p.message,
                          "chain": p.chain} for p in report.problems]}
