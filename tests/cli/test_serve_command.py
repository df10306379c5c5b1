"""`gateway serve` refuses to start, with one clear line and no traceback, when it cannot keep its promises:
data files it cannot write (issue 7, item 6), anonymous access beyond loopback (item 2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from cli_run import run_cli, run_subprocess


def gateway_serve(root: Path, config: dict[str, object], *args: str,
                  process: bool = False) -> subprocess.CompletedProcess[str]:
    """`gateway serve` in ``root`` with this config: in this process (it must refuse before it serves), or as
    a real process (``process``)."""
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    (root / "gateway.yaml").write_text(yaml.safe_dump({"policies": ["policies"], **config}), encoding="utf-8")
    run = run_subprocess if process else run_cli
    return run(root, "serve", str(root / "gateway.yaml"), "--port", "0", *args)


def unwritable_cases(root: Path) -> list[tuple[str, dict[str, object], str]]:
    (root / "not-a-folder").write_text("a file where the data folder should be", encoding="utf-8")
    (root / "audit-dir").mkdir()
    return [
        ("store under a file", {"store": {"sqlite": "not-a-folder/gateway.sqlite3"}},
         str(root / "not-a-folder" / "gateway.sqlite3")),
        ("audit under a file", {"audit": {"file": "not-a-folder/audit.jsonl"}}, str(root / "not-a-folder")),
        ("audit is a folder", {"audit": {"file": "audit-dir"}}, str(root / "audit-dir")),
        ("store on a read-only file system", {"store": {"sqlite": "/proc/gateway-data/gateway.sqlite3"}},
         "/proc/gateway-data/gateway.sqlite3"),
    ]


@pytest.mark.parametrize("case", range(4), ids=["store-under-file", "audit-under-file", "audit-is-dir", "read-only-fs"])
def test_an_unwritable_data_file_is_one_clear_line_not_a_traceback(tmp_path, case):
    name, config, path = unwritable_cases(tmp_path)[case]
    result = gateway_serve(tmp_path, config, process=case == 0)  # one through the console entry
    assert result.returncode == 1, name
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gateway: cannot ")
    assert path in lines[0]


def test_anonymous_access_on_a_public_address_is_refused_at_start(tmp_path):
    result = gateway_serve(tmp_path, {"store": {"sqlite": "data/g.sqlite3"}, "audit": {"file": "data/a.jsonl"},
                                      "auth": {"anonymous": {"id": "guest"}}}, "--host", "0.0.0.0")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "error[anonymous-beyond-loopback]" in result.stderr
    assert "auth.anonymous_beyond_loopback: true" in result.stderr


def test_approvers_sign_in_sessions_are_not_split_across_workers(tmp_path):
    """Sessions live in the process that signed the approver in: several workers would lose them at random."""
    from cli_run import run_cli

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text("policy: p\nrules: []\n", encoding="utf-8")
    issuer = "https://idp.example.com"
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump({
        "policies": ["policies"], "store": {"sqlite": "data/g.sqlite3"}, "audit": {"file": "data/a.jsonl"},
        "auth": {"jwt": [{"issuer": issuer, "audiences": ["https://gateway.example.com/mcp"]}]},
        "approvals": {"sso": {"issuer": issuer, "client_id": "gateway"}}}), encoding="utf-8")
    result = run_cli(tmp_path, "serve", "gateway.yaml", "--workers", "2")
    assert result.returncode == 2
    assert result.stderr.strip() == "gateway: approvals.sso needs --workers 1: an approver's sign-in session is" \
        " held by one process"


def test_an_audit_file_whose_chain_cannot_be_continued_stops_the_start(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text('{"event":"call.outcome","written":"by hand"}\n', encoding="utf-8")
    result = gateway_serve(tmp_path, {"store": {"sqlite": "data/g.sqlite3"}, "audit": {"file": "data/a.jsonl"}})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gateway: {tmp_path / 'data' / 'a.jsonl'}: error[audit-chain-broken]: the audit chain"
                           " cannot be continued: ")
    assert "audit.on_broken_chain: start_new" in line


@pytest.mark.parametrize("key", ["not a key", "rsa", "missing"])
def test_a_signing_key_that_cannot_be_used_is_a_config_error_at_start(tmp_path, key):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    if key == "rsa":
        (tmp_path / "signing.pem").write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    elif key == "not a key":
        (tmp_path / "signing.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    result = gateway_serve(tmp_path, {"store": {"sqlite": "data/g.sqlite3"}, "audit": {
        "file": "data/a.jsonl", "sign": {"key": {"file": "signing.pem"}, "every": 100}}})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    code = "secret-missing" if key == "missing" else "audit-sign-key"
    assert f"gateway.yaml:6:7: error[{code}]: " in result.stderr, result.stderr  # at audit.sign.key's file
    assert {"not a key": "audit.sign.key: not a PEM private key", "rsa": "audit.sign.key: the key is RSA, not Ed25519",
            "missing": "cannot read secret file"}[key] in result.stderr
    assert not (tmp_path / "data" / "a.jsonl").exists()  # nothing was written before the start stopped
