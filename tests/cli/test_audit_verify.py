"""`gateway audit verify FILE... [--key PUB]`: exit 0 with "N events checked, chain intact", 1 naming the line
tampered with and what was done, 2 when a file or the key cannot be read; in process, and once through the
console entry."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run_cli, run_subprocess
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.pipeline.audit import AuditLog, ChainSettings, Rotation
from gateway.pipeline.audit_keys import CheckpointSigner


def rotated_log(folder: Path, events: int = 300, signer: CheckpointSigner | None = None) -> list[Path]:
    """A log rotated twice by size: FILE.2, FILE.1, FILE, oldest first."""
    path = folder / "audit.jsonl"
    log = AuditLog(path, rotation=Rotation(65_536), chain=ChainSettings(signer, every=50))
    for n in range(events):
        log.write({"event": "call.outcome", "n": n, "pad": "p" * 400})
    log.close()
    files = [path.with_name("audit.jsonl.2"), path.with_name("audit.jsonl.1"), path]
    assert all(f.exists() for f in files)
    return files


def public_key(folder: Path, private: Ed25519PrivateKey) -> Path:
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (folder / "audit-public.pem").write_bytes(pem)
    return folder / "audit-public.pem"


def test_an_intact_log_in_any_order_exits_0_and_says_how_many_events(tmp_path: Path) -> None:
    files = rotated_log(tmp_path)
    result = run_cli(tmp_path, "audit", "verify", *(f.name for f in reversed(files)))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "300 events checked, chain intact"
    assert "(seq 1 to 300) in audit.jsonl.2, audit.jsonl.1, audit.jsonl; intact" in lines[0]


def test_a_deleted_line_exits_1_naming_the_file_the_line_and_the_kind(tmp_path: Path) -> None:
    files = rotated_log(tmp_path)
    lines = files[1].read_bytes().splitlines(keepends=True)
    files[1].write_bytes(b"".join([*lines[:9], *lines[10:]]))

    result = run_cli(tmp_path, "audit", "verify", *(f.name for f in files))
    assert result.returncode == 1
    out = result.stdout.splitlines()
    assert out[0].startswith("audit.jsonl.1:10: removed: seq ")
    assert out[-1] == "299 events checked, chain broken"


def test_checkpoints_verify_with_the_public_key_and_a_changed_one_fails(tmp_path: Path) -> None:
    private = Ed25519PrivateKey.generate()
    files = rotated_log(tmp_path, signer=CheckpointSigner(private))
    key = public_key(tmp_path, private)
    good = run_cli(tmp_path, "audit", "verify", "--key", str(key), *(f.name for f in files))
    assert good.returncode == 0, good.stdout
    assert "checkpoints signed by the key, the last at seq" in good.stdout

    lines = files[0].read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"audit.checkpoint"' in line)
    event = json.loads(lines[at])
    event["signature"] = "A" * 86 + "=="  # the same head, with a signature the key never made
    lines[at] = json.dumps(event, separators=(",", ":")).encode() + b"\n"
    files[0].write_bytes(b"".join(lines))

    bad = run_cli(tmp_path, "audit", "verify", "--key", str(key), *(f.name for f in files))
    assert bad.returncode == 1
    assert f"audit.jsonl.2:{at + 1}: checkpoint: its signature does not verify" in bad.stdout


def test_several_chains_are_each_verified_on_their_own(tmp_path: Path) -> None:
    for worker in (0, 1):
        log = AuditLog(tmp_path / f"audit.worker-{worker}.jsonl")
        for n in range(5 + worker):
            log.write({"event": "call.outcome", "n": n})
        log.close()
    result = run_cli(tmp_path, "audit", "verify", "audit.worker-0.jsonl", "audit.worker-1.jsonl", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.returncode, report["ok"], report["events"]) == (0, True, 11)
    assert sorted(c["events"] for c in report["chains"]) == [5, 6]


def test_a_missing_file_or_a_bad_key_exits_2(tmp_path: Path) -> None:
    rotated_log(tmp_path)
    missing = run_cli(tmp_path, "audit", "verify", "nowhere.jsonl")
    assert (missing.returncode, missing.stderr.strip()) == (
        2, "gateway audit verify: error: cannot read nowhere.jsonl: No such file or directory")
    (tmp_path / "private.pem").write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    private = run_cli(tmp_path, "audit", "verify", "--key", "private.pem", "audit.jsonl")
    assert private.returncode == 2
    assert "a private key: give the public key (openssl pkey -in KEY -pubout)" in private.stderr


def test_the_console_entry_verifies(tmp_path: Path) -> None:
    files = rotated_log(tmp_path)
    result = run_subprocess(tmp_path, "audit", "verify", *(f.name for f in files))
    assert (result.returncode, result.stdout.splitlines()[-1]) == (0, "300 events checked, chain intact")
