"""`gateway replay` on a real decision log: the quick start served on loopback, called over REST, then
its audit log decided again under changed policies."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flow_support import cap_rule, egress_rule, label_rule, policy, sum_tally
from loopback import serve_app

from gateway.app import build_app, server_options
from gateway.cli import main
from gateway.config.load import load_config

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
SESSION = "replay-run-1"

# The calls driven through the quick start, in order: (call id, tool, arguments).
CALLS = [
    ("c-search", "notes_search", {"query": "milk", "limit": 100}),  # allow, limit rewritten to 5
    ("c-secret", "notes_add_note", {"text": "wifi password: hunter2"}),  # reject (the log redacts "password")
    ("c-fetch", "notes_fetch", {"url": "http://169.254.169.254/latest"}),  # reject: internal address
    ("c-transfer", "payments_transfer",
     {"from_account": "acc-1", "to_account": "acc-2", "amount": 10, "currency": "USD"}),  # allow
    ("c-delete", "notes_delete_note", {"note_id": 1}),  # approve (pending)
    ("c-list", "notes_list_notes", {}),  # allow
]

CHANGED_RULES = """
policy: changes
rules:
  - id: no-listing
    tools: [notes_list_notes]
    when: '"developers" in principal.groups'
    action: reject
    message: Listing is off.
  - id: shadow-small-transfers
    tools: [payments_transfer]
    when: double(args.amount) > 5.0
    action: reject
    mode: audit
    message: Would refuse small transfers.
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _drive(config_file: Path, calls: list[tuple[str, str, dict[str, Any]]], session: str = SESSION) -> None:
    config = load_config(config_file)
    async with serve_app(build_app(config), options=server_options(config), startup=60) as url, \
            httpx2.AsyncClient(base_url=url, timeout=30) as client:
        for call_id, tool, arguments in calls:
            run = session if "@" not in call_id else call_id.split("@", 1)[1]
            response = await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments, "call_id": call_id},
                                         headers={"X-Gateway-Session": run})
            assert response.status_code in (200, 202), response.text
        health = await client.get("/healthz")
        (config_file.parent / "healthz.json").write_text(health.text)


def _copy_quickstart(root: Path) -> None:
    """The quick start in ``root``: its payments API on a free port, "password" redacted from the log, claims
    on its principal."""
    shutil.copytree(QUICKSTART, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".data"))
    config = yaml.safe_load((root / "gateway.yaml").read_text())
    port = str(_free_port())
    payments = next(u for u in config["upstreams"] if u["name"] == "payments")
    payments["http"]["base_url"] = f"http://127.0.0.1:{port}"
    payments["http"]["launch"] = {"command": sys.executable, "args": ["payments_api.py", "--port", port]}
    notes = next(u for u in config["upstreams"] if u["name"] == "notes")
    notes["mcp"]["command"] = sys.executable
    config["audit"]["redact_patterns"] = ["(?i)password"]
    # signed checkpoints between the events: replay reads call.outcome events only, chain fields or not
    (root / "signing.pem").write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    config["audit"]["sign"] = {"key": {"file": "signing.pem"}, "every": 2}
    config["auth"]["anonymous"]["claims"] = {"team": "payments", "token": "claim-secret-1"}
    (root / "gateway.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the quick start after the calls above; returns its folder."""
    root = tmp_path_factory.mktemp("quickstart")
    _copy_quickstart(root)
    asyncio.run(_drive(root / "gateway.yaml", CALLS))
    return root


def _replay(capsys: pytest.CaptureFixture[str], root: Path, *extra: str, policies: list[Path] | None = None,
            config: bool = True) -> tuple[int, str]:
    args = ["replay", "--audit", str(root / ".data" / "audit.jsonl"), "--policies",
            *[str(p) for p in policies or [root / "policies"]], *extra]
    if config:
        args += ["--config", str(root / "gateway.yaml")]
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def _json(capsys: pytest.CaptureFixture[str], root: Path, *extra: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    code, out = _replay(capsys, root, "--format", "json", *extra, **kw)
    return code, json.loads(out)


def _changed_policies(root: Path) -> Path:
    """The quick start's policies with: no-internal-fetches dropped, searches capped at 3, listing refused,
    and an audit-mode rule on transfers."""
    new = root / "new-policies"
    new.mkdir(exist_ok=True)
    shutil.copy(root / "policies" / "payments.yaml", new / "payments.yaml")
    quick = yaml.safe_load((root / "policies" / "quickstart.yaml").read_text())
    quick["rules"] = [r for r in quick["rules"] if r["id"] != "no-internal-fetches"]
    cap = next(r for r in quick["rules"] if r["id"] == "cap-search-limit")
    cap["rewrite"]["set"]["limit"] = "3"
    (new / "quickstart.yaml").write_text(yaml.safe_dump(quick, sort_keys=False))
    (new / "changes.yaml").write_text(CHANGED_RULES)
    return new


def test_the_audit_events_carry_what_a_replay_needs(quickstart: Path) -> None:
    events = [json.loads(line) for line in (quickstart / ".data" / "audit.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "audit.checkpoint" for e in events) >= 3  # what the other tests replay around
    outcomes = {e["call_id"]: e for e in events if e["event"] == "call.outcome"}
    assert set(outcomes) == {c[0] for c in CALLS}
    delete = outcomes["c-delete"]["context"]
    assert delete["tool"]["annotations"]["destructiveHint"] is True
    assert (delete["tool"]["title"], delete["tool"]["description"]) == ("Delete a note", "Delete a note by id.")
    assert delete["policy_verdict"] == "approve"
    assert delete["policy_decided_by"] == "quickstart/deletes-need-approval"
    assert delete["stage"] == "request"
    assert delete["call_time"].startswith("20")
    assert delete["session"]["id"] == SESSION and delete["session"]["calls"] == 4
    assert delete["session"]["calls_by_tool"] == {"notes_search": 1, "notes_add_note": 1, "notes_fetch": 1,
                                                  "payments_transfer": 1}
    assert outcomes["c-search"]["context"]["session"]["calls"] == 0
    assert len(delete["env_revision"]) == 16
    # claims are logged for replay, through the same redaction as the arguments
    assert delete["principal_claims"] == {"team": "payments", "token": "[REDACTED]"}
    assert "/context/principal_claims/token" in outcomes["c-delete"]["redacted"]
    assert "claim-secret-1" not in (quickstart / ".data" / "audit.jsonl").read_text()
    secret = outcomes["c-secret"]
    assert secret["original_args"] == {"text": "wifi [REDACTED]: hunter2"}
    assert "/original_args/text" in secret["redacted"]


def test_the_same_policies_change_nothing(quickstart: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every input the quick start's rules read (annotations, session counters, env, call time) comes back
    # from the log: replayed under the policies that decided them, the calls decide the same, except the
    # one whose deciding input was redacted, which is reported as such and does not fail the run.
    code, report = _json(capsys, quickstart)
    assert code == 0
    assert (report["replayed"], report["changed"], report["unchanged"], report["input_redacted"]) == (6, 0, 5, 1)
    assert report["env_mismatch"] == 0
    [redacted] = report["changes"]
    assert redacted["kind"] == "input_redacted"
    assert (redacted["was"], redacted["now"], redacted["was_decided_by"]) == (
        "reject", "allow", "quickstart/no-secrets-in-notes")
    assert redacted["examples"][0]["call_id"] == "c-secret"
    assert redacted["examples"][0]["input_redacted"] == ["/original_args/text", "/context/principal_claims/token"]


def test_the_diff_under_changed_policies(quickstart: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _changed_policies(quickstart)
    code, report = _json(capsys, quickstart, policies=[new])
    assert code == 1
    assert report["changed"] == 3
    changes = {(c["kind"], c["was"], c["now"]): c for c in report["changes"]}
    assert set(changes) == {("decision", "reject", "allow"), ("decision", "allow", "reject"),
                            ("args", "allow", "allow"), ("input_redacted", "reject", "allow")}
    fetch = changes[("decision", "reject", "allow")]
    assert (fetch["count"], fetch["was_decided_by"], fetch["now_decided_by"]) == (
        1, "quickstart/no-internal-fetches", None)
    assert fetch["examples"][0]["call_id"] == "c-fetch"
    listing = changes[("decision", "allow", "reject")]
    assert listing["now_decided_by"] == "changes/no-listing"
    assert listing["examples"][0]["message"] == "Listing is off."
    search = changes[("args", "allow", "allow")]["examples"][0]
    assert search["call_id"] == "c-search"
    assert (search["final_args_was"], search["final_args_now"]) == ({"query": "milk", "limit": 5},
                                                                    {"query": "milk", "limit": 3})
    [shadow] = [s for s in report["shadow"] if s["rule"] == "changes/shadow-small-transfers"]
    assert (shadow["would_fire"], shadow["recorded"], shadow["action"]) == (1, 0, "reject")
    assert shadow["examples"][0]["call_id"] == "c-transfer"

    code, text = _replay(capsys, quickstart, policies=[new])
    assert code == 1
    assert text.startswith("replayed 6 of 6 recorded calls under revision ")
    assert "3 changed, 1 differ on redacted input, 2 unchanged" in text
    assert "reject → allow: 1 call(s)\n    was decided by quickstart/no-internal-fetches, now by the default" in text
    assert "allow → reject: 1 call(s)\n    was decided by the default, now by changes/no-listing" in text
    assert "allow → allow (final arguments differ): 1 call(s)" in text
    assert '; final arguments {"query": "milk", "limit": 5} → {"query": "milk", "limit": 3}' in text
    assert "reject → allow (input redacted in the log: not counted as a change): 1 call(s)" in text
    assert "~ changes/shadow-small-transfers [reject]: would fire on 1 of 6 calls (recorded: 0)" in text
    assert "e.g. c-transfer payments_transfer by quickstart-user" in text

    allowed, _ = _replay(capsys, quickstart, "--allow-changes", policies=[new])
    assert allowed == 0


def test_session_counters_are_replayed(quickstart: Path, capsys: pytest.CaptureFixture[str]) -> None:
    budget = quickstart / "budget"
    budget.mkdir(exist_ok=True)
    (budget / "budget.yaml").write_text(
        "policy: budget\nrules:\n  - id: three-calls\n    when: session.calls >= 3\n    action: terminate\n")
    code, report = _json(capsys, quickstart, policies=[quickstart / "policies", budget])
    assert code == 1
    moved = {(c["was"], c["now"]): c["count"] for c in report["changes"] if c["kind"] == "decision"}
    # the 4th call (transfer) and the 6th (list) were allowed, the 5th (delete) held for approval
    assert moved == {("allow", "terminate"): 2, ("approve", "terminate"): 1}


def test_env_comes_from_the_config(quickstart: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Without --config the env is empty: quickstart/call-budget reads env.max_calls_per_session (and
    # dry-run-in-staging env.stage) and fails closed, so calls change, and the report says the env differs.
    code, report = _json(capsys, quickstart, config=False)
    assert code == 1
    assert report["env_mismatch"] == 6
    decided = [c for c in report["changes"] if c["kind"] == "decision"]
    assert "quickstart/call-budget" in {c["now_decided_by"] for c in decided}
    assert {c["now"] for c in decided} <= {"reject", "terminate"}  # rules that fail decide closed
    assert sum(c["count"] for c in decided) == 4  # all but the two calls that were refused anyway
    code, text = _replay(capsys, quickstart, config=False)
    assert "warning: 6 call(s) were recorded under another env (pass the gateway's --config)" in text


def test_the_configs_policies_by_default(quickstart: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", "--audit", str(quickstart / ".data" / "audit.jsonl"), "--config",
                 str(quickstart / "gateway.yaml"), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["replayed"], report["changed"]) == (0, 6, 0)
    assert main(["replay", "--audit", str(quickstart / ".data" / "audit.jsonl")]) == 2
    assert "give --policies, or --config" in capsys.readouterr().err


def test_unusable_inputs_exit_2(quickstart: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("policy: b\nrules:\n  - id: r\n    when: 'args.x ==='\n    action: reject\n")
    code, text = _replay(capsys, quickstart, policies=[broken])
    assert code == 2 and "broken.yaml:4" in text
    code = main(["replay", "--audit", str(tmp_path / "missing.jsonl"), "--policies", str(quickstart / "policies")])
    assert code == 2
    assert "cannot read the decision log" in capsys.readouterr().err


def test_lines_that_cannot_be_replayed_are_counted(quickstart: Path, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    lines = (quickstart / ".data" / "audit.jsonl").read_text().splitlines()
    search = next(json.loads(x) for x in lines if '"c-search"' in x and '"call.outcome"' in x)
    summarised = search | {"call_id": "c-big", "original_args": {"query": {"truncated": True, "sha256": "ab",
                                                                            "bytes": 99999, "preview": "{"}}}
    older = {k: v for k, v in search.items() if k != "context"} | {"call_id": "c-old"}
    log = tmp_path / "audit.jsonl"
    odd = {"event": "call.outcome", "rules": 5, "redacted": 7, "context": "x"}
    log.write_text("\n".join([*lines, json.dumps(summarised), json.dumps(older), json.dumps(odd), "{not json", "[1]"])
                   + "\n")
    code = main(["replay", "--audit", str(log), "--policies", str(quickstart / "policies"),
                 "--config", str(quickstart / "gateway.yaml"), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (report["events"], report["replayed"]) == (9, 6)
    assert report["skipped"] == {"input summarised in the log (larger than audit.max_value_bytes)": 1,
                                 "no policy decision recorded (refused before the policies, or an older log)": 2}
    assert len(report["bad_lines"]) == 2


def test_ci_revision_matches_healthz(quickstart: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The gateway loaded its policies by the config's absolute path; CI checks them by a relative one.
    served = json.loads((quickstart / "healthz.json").read_text())["revision"]
    monkeypatch.chdir(quickstart)
    assert main(["check", "policies", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] == served
    assert main(["check", "./policies/", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] == served


def test_a_rule_reading_redacted_claims_is_put_down_to_redaction(quickstart: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    claims = quickstart / "claims"
    claims.mkdir(exist_ok=True)
    (claims / "claims.yaml").write_text(
        "policy: claims\nrules:\n"
        "  - id: token-holders-only\n    tools: [notes_list_notes]\n"
        "    when: principal.claims.token != \"claim-secret-1\"\n    action: reject\n"
        "  - id: payments-team-no-transfers\n    tools: [payments_transfer]\n"
        "    when: principal.claims.team == \"payments\"\n    action: reject\n")
    code, report = _json(capsys, quickstart, policies=[quickstart / "policies", claims])
    # the token was redacted in the log, so the listing's change is not evidence; the team claim was
    # logged as it was, so the transfer's change is
    assert code == 1
    kinds = {(c["kind"], c["now_decided_by"]): c["count"] for c in report["changes"]}
    assert kinds[("input_redacted", "claims/token-holders-only")] == 1
    assert kinds[("decision", "claims/payments-team-no-transfers")] == 1
    assert report["changed"] == 1


# --- runs: labels and tallies rebuilt under the new set ---------------------------------------------------------

# Recorded under: search results labelled untrusted, transfers tallied, no cap.
FLOWS = policy("flows", tallies=[sum_tally()], rules=[label_rule("notes-are-untrusted", ["notes_search"])])

# Replayed under: a cap of 25 per run, and a note written after untrusted content needs a person.
CAPS = policy("caps", rules=[
    cap_rule(25, message="This run may move at most 25 USD."),
    egress_rule("notes-after-untrusted", tools=["notes_add_note"], message=None, approval={"approvers": ["bob"]}),
])

TRANSFER = {"from_account": "acc-1", "to_account": "acc-2", "amount": 10, "currency": "USD"}
RUN_CALLS = [
    ("r-search", "notes_search", {"query": "milk"}),
    ("r-t1", "payments_transfer", TRANSFER),
    ("r-other@other-run", "payments_transfer", TRANSFER),  # another run of the same principal
    ("r-t2", "payments_transfer", TRANSFER),
    ("r-t3", "payments_transfer", TRANSFER),
    ("r-note", "notes_add_note", {"text": "buy milk"}),
]


# The pipeline that records what a run carries (labels added, context.session's labels and tallies) is helper A2's
# part of issue 21: these run once it is in the tree.
needs_flow = pytest.mark.skipif(importlib.util.find_spec("gateway.pipeline.flow_step") is None,
                                reason="the pipeline does not record a run's flow yet (gateway/pipeline/flow_step.py)")


@pytest.fixture(scope="module")
def flowstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick start with FLOWS, after RUN_CALLS in one run (and one call in another); returns its folder."""
    root = tmp_path_factory.mktemp("flowstart")
    _copy_quickstart(root)
    (root / "policies" / "flows.yaml").write_text(FLOWS)
    asyncio.run(_drive(root / "gateway.yaml", RUN_CALLS, session="flow-run"))
    (root / "caps").mkdir()
    (root / "caps" / "caps.yaml").write_text(CAPS)
    return root


def _outcomes(root: Path) -> list[dict[str, Any]]:
    lines = (root / ".data" / "audit.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "call.outcome"]


@needs_flow
def test_the_log_records_what_a_run_carries(flowstart: Path) -> None:
    events = {e["call_id"]: e for e in _outcomes(flowstart)}
    assert events["r-search"]["flow"]["labels_added"] == {"request": [], "response": ["untrusted"]}
    assert events["r-note"]["context"]["session"]["labels"] == ["untrusted"]
    assert events["r-t3"]["context"]["session"]["tallies"]["transferred"] == 20.0


@needs_flow
def test_a_cap_and_a_label_rule_change_a_runs_later_calls(flowstart: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, flowstart, policies=[flowstart / "policies", flowstart / "caps"])
    assert code == 1
    assert (report["replayed"], report["runs"], report["changed"]) == (6, 2, 2)
    moved = {(c["was"], c["now"], c["now_decided_by"]): [e["call_id"] for e in c["examples"]]
             for c in report["changes"]}
    assert moved == {("allow", "reject", "caps/spend-cap"): ["r-t3"],
                     ("allow", "approve", "caps/notes-after-untrusted"): ["r-note"]}


@needs_flow
def test_a_log_that_starts_mid_run_starts_from_its_first_event(flowstart: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Without the search and the first transfer, the run's label and its 10 USD come from r-t2's context.
    lines = (flowstart / ".data" / "audit.jsonl").read_text().splitlines()
    kept = [x for x in lines if '"r-search"' not in x and '"r-t1"' not in x]
    log = tmp_path / "audit.jsonl"
    log.write_text("\n".join(kept) + "\n")
    code = main(["replay", "--audit", str(log), "--policies", str(flowstart / "policies"), str(flowstart / "caps"),
                 "--config", str(flowstart / "gateway.yaml"), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    moved = {(c["was"], c["now"]): [e["call_id"] for e in c["examples"]] for c in report["changes"]}
    assert moved == {("allow", "reject"): ["r-t3"], ("allow", "approve"): ["r-note"]}
