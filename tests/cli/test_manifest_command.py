"""`gateway check --write-manifest`, run in this process through `gateway.cli.main`; one test per command runs the real
command in a subprocess."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml
from cli_run import run_cli, run_subprocess

POLICY = """
    policy: pay
    rules:
      - id: big
        tools: [payments_transfer]
        when: args.amount > 1000
        action: approve
        approval: {approvers: ["group:finance"]}
"""

OTHER = """
    policy: notes
    rules:
      - id: no-deletes
        tools: [notes_delete]
        action: reject
"""

SUITE = """
    suite: pay
    cases:
      - name: small
        call: {tool: payments_transfer, args: {amount: 5}}
        expect: {decision: allow}
"""


def gateway(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `gateway ARGS` in ``cwd``, in this process (``run_subprocess`` for the real console entry)."""
    return run_cli(cwd, *args)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_write_manifest_lists_each_policy_file_with_its_digest_relative_and_sorted(write, tmp_path):
    write("policies/pay.yaml", POLICY)
    write("policies/sub/notes.yaml", OTHER)
    write("policies/pay_test.yaml", SUITE)
    out = run_subprocess(tmp_path, "check", "policies", "--write-manifest", "policies/policies.manifest.json")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "wrote policies/policies.manifest.json (2 files)"
    manifest = tmp_path / "policies" / "policies.manifest.json"
    text = manifest.read_text()
    assert json.loads(text) == {"version": 1, "files": {
        "pay.yaml": sha256(tmp_path / "policies" / "pay.yaml"),
        "sub/notes.yaml": sha256(tmp_path / "policies" / "sub" / "notes.yaml")}}  # test suites are not policies
    assert str(tmp_path) not in text
    # the same files give the same bytes, and nothing is left beside it
    assert gateway(tmp_path, "check", "policies", "--write-manifest", "policies/policies.manifest.json").returncode == 0
    assert manifest.read_text() == text
    assert sorted(p.name for p in (tmp_path / "policies").iterdir()) == [
        "pay.yaml", "pay_test.yaml", "policies.manifest.json", "sub"]


def test_a_set_with_errors_gets_no_manifest(write, tmp_path):
    write("policies/pay.yaml", POLICY)
    write("policies/broken.yaml", "policy: broken\nrules:\n  - id: x\n    when: args.x == )\n    action: allow\n")
    out = gateway(tmp_path, "check", "policies", "--write-manifest")
    assert out.returncode == 1
    assert "error[cel-compile]" in out.stderr
    assert not (tmp_path / "policies.manifest.json").exists()


def test_the_manifest_goes_where_the_config_says_or_into_the_current_folder(write, tmp_path):
    write("policies/pay.yaml", POLICY)
    write("gateway.yaml", yaml.safe_dump({"policies": ["policies"], "reload": {"manifest": "signed/manifest.json"}}))
    (tmp_path / "signed").mkdir()
    out = gateway(tmp_path, "check", "--config", "gateway.yaml", "--write-manifest", "--format", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and report["manifest"] == str(tmp_path / "signed" / "manifest.json")
    written = json.loads((tmp_path / "signed" / "manifest.json").read_text())
    assert written["files"] == {"../policies/pay.yaml": sha256(tmp_path / "policies" / "pay.yaml")}

    out = gateway(tmp_path, "check", "policies", "--write-manifest")
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "policies.manifest.json").read_text())["files"] == {
        "policies/pay.yaml": sha256(tmp_path / "policies" / "pay.yaml")}


def test_an_unwritable_manifest_is_an_error_not_a_traceback(write, tmp_path):
    write("policies/pay.yaml", POLICY)
    out = gateway(tmp_path, "check", "policies", "--write-manifest", "no/such/folder/manifest.json")
    assert out.returncode == 1
    assert "error[manifest-write]: cannot write the manifest" in out.stderr
    assert "Traceback" not in out.stderr
