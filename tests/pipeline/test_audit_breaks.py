"""Tampering with a decision log, every way the issue names, and what verifying it reports: the first line
tampered with (``file:line``) and what was done, on logs the real writer wrote.

The logs: one file of 12 events (line k holds seq k), or the same chain rotated after 6 events (``FILE.1``
holds seq 1-6, ``FILE`` seq 7-12). Each case edits the bytes as an attacker with write access would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.pipeline.audit import AuditLog, ChainSettings
from gateway.pipeline.audit_keys import CheckpointSigner, CheckpointVerifier
from gateway.pipeline.audit_verify import verify

Lines = list[bytes]


def written(path: Path, events: int = 12, rotate_after: int | None = None, chain: ChainSettings | None = None) -> None:
    log = AuditLog(path) if chain is None else AuditLog(path, chain=chain)
    for n in range(events):
        if n == rotate_after:
            path.rename(path.with_name(path.name + ".1"))
        log.write({"event": "call.outcome", "n": n, "tool": "payments_transfer"})
    log.close()


def read(path: Path) -> Lines:
    return path.read_bytes().splitlines(keepends=True)


def forged(seq: int, prev: str | None, chain: str) -> bytes:
    """A line the attacker wrote, with the chain fields in the writer's own shape."""
    return json.dumps({"event": "call.outcome", "n": "forged", "chain": chain, "seq": seq, "prev": prev},
                      separators=(",", ":")).encode() + b"\n"


def chain_of(line: bytes) -> str:
    return str(json.loads(line)["chain"])


def sha(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def rechained(lines: Lines, start: int) -> Lines:
    """What a forger who knows the format does after changing line ``start``: every later prev recomputed (and
    the head a checkpoint names, though not its signature)."""
    out = lines[:start + 1]
    for line in lines[start + 1:]:
        event = json.loads(line)
        event["prev"] = sha(out[-1])
        if "head" in event:
            event["head"]["sha256"] = event["prev"]
        out.append(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    return out


# Each case: what is done to the lines of the single file, and the first problem (line, kind) expected.
ONE_FILE: dict[str, tuple[Callable[[Lines], Lines], int, str]] = {
    "a line edited": (lambda ls: [*ls[:4], ls[4].replace(b'"n":4', b'"n":40'), *ls[5:]], 5, "changed"),
    "a line deleted": (lambda ls: [*ls[:4], *ls[5:]], 5, "removed"),
    "three lines deleted": (lambda ls: [*ls[:4], *ls[7:]], 5, "removed"),
    "an unchained line inserted": (lambda ls: [*ls[:4], b'{"event":"call.outcome","n":"x"}\n', *ls[4:]], 5,
                                   "not-chained"),
    "a forged line with the right seq and prev inserted": (
        lambda ls: [*ls[:4], forged(5, sha(ls[3]), chain_of(ls[0])), *ls[4:]], 5, "inserted"),
    "a forged line with the right seq inserted": (
        lambda ls: [*ls[:4], forged(5, "0" * 64, chain_of(ls[0])), *ls[4:]], 5, "inserted"),
    "a forged line with the right seq and prev after the real one": (
        lambda ls: [*ls[:5], forged(5, sha(ls[3]), chain_of(ls[0])), *ls[5:]], 6, "inserted"),
    "a line copied in again": (lambda ls: [*ls[:5], ls[4], *ls[5:]], 6, "inserted"),
    "two lines swapped": (lambda ls: [*ls[:4], ls[5], ls[4], *ls[6:]], 5, "reordered"),
    "the file cut in the middle of a line": (lambda ls: [*ls[:11], ls[11][:40]], 12, "truncated"),
    "the first line deleted": (lambda ls: ls[1:], 1, "removed"),
}


@pytest.mark.parametrize("case", sorted(ONE_FILE))
def test_tampering_with_one_file_is_found_at_its_line(tmp_path: Path, case: str) -> None:
    path = tmp_path / "audit.jsonl"
    written(path)
    assert verify([path]).ok
    tamper, line, kind = ONE_FILE[case]
    path.write_bytes(b"".join(tamper(read(path))))

    report = verify([path])
    assert not report.ok
    first = report.problems[0]
    assert (first.where.file, first.where.line, first.kind) == (str(path), line, kind), report.problems


def test_a_line_moved_far_is_removed_where_it_was_and_out_of_place_where_it_went(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    written(path)
    lines = read(path)
    path.write_bytes(b"".join([*lines[:3], *lines[4:9], lines[3], *lines[9:]]))  # seq 4 moved after seq 9
    assert [(p.where.line, p.kind) for p in verify([path]).problems] == [(4, "removed"), (9, "inserted")]


def rotated(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "audit.jsonl"
    written(path, rotate_after=6)
    return path.with_name("audit.jsonl.1"), path


# Each case: what is done to (FILE.1's lines, FILE's lines), the files given, and the first problem expected.
TWO_FILES: dict[str, tuple[Callable[[Lines, Lines], tuple[Lines, Lines]], str, int, str]] = {
    "a line of the older file spliced into the newer": (lambda old, new: (old, [*new[:2], old[2], *new[2:]]),
                                                        "new", 3, "inserted"),
    "the end of the older file cut off": (lambda old, new: (old[:4], new), "new", 1, "removed"),
    "the last line of the older file edited": (
        lambda old, new: ([*old[:5], old[5].replace(b'"n":5', b'"n":50')], new), "old", 6, "changed"),
    "the newer file's first line deleted": (lambda old, new: (old, new[1:]), "new", 1, "removed"),
}


@pytest.mark.parametrize("case", sorted(TWO_FILES))
def test_tampering_across_rotated_files_is_found(tmp_path: Path, case: str) -> None:
    old, new = rotated(tmp_path)
    assert verify([new, old]).ok
    tamper, where, line, kind = TWO_FILES[case]
    old_lines, new_lines = tamper(read(old), read(new))
    old.write_bytes(b"".join(old_lines))
    new.write_bytes(b"".join(new_lines))

    first = verify([new, old]).problems[0]  # given newest first: put in order by the chain
    assert (first.where.file, first.where.line, first.kind) == (str({"old": old, "new": new}[where]), line, kind)


def test_a_file_left_out_of_the_middle_shows(tmp_path: Path) -> None:
    _, new = rotated(tmp_path)
    problems = verify([new]).problems
    assert [(p.where.line, p.kind) for p in problems] == [(1, "removed")]
    assert "begins at seq 7" in problems[0].message


def test_a_line_of_another_chain_spliced_in_is_found(tmp_path: Path) -> None:
    mine, other = tmp_path / "audit.worker-0.jsonl", tmp_path / "audit.worker-1.jsonl"
    written(mine)
    written(other, events=3)
    lines = read(mine)
    mine.write_bytes(b"".join([*lines[:3], read(other)[1], *lines[3:]]))

    problems = verify([mine, other]).problems
    assert [(p.where.file, p.where.line, p.kind) for p in problems] == [(str(mine), 4, "inserted")]


# --- what only a signature catches --------------------------------------------------------------------------


def signed_log(path: Path) -> CheckpointVerifier:
    private = Ed25519PrivateKey.generate()
    written(path, chain=ChainSettings(CheckpointSigner(private), every=5))  # checkpoints: lines 6, 12, 15 (at close)
    return CheckpointVerifier(private.public_key())


def test_a_rewritten_tail_passes_the_hash_chain_and_fails_its_signed_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    verifier = signed_log(path)
    lines = read(path)
    lines[3] = lines[3].replace(b'"n":3', b'"n":30')
    path.write_bytes(b"".join(rechained(lines, 3)))  # every prev after the change recomputed

    assert verify([path]).ok  # the hash chain alone cannot tell: the limit the checkpoints are for
    problems = verify([path], verifier).problems
    assert [(p.where.line, p.kind) for p in problems][:1] == [(6, "checkpoint")]
    assert problems[0].message == "its signature does not verify: the checkpoint was forged or changed"


def test_a_changed_checkpoint_signature_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    verifier = signed_log(path)
    lines = read(path)
    event = json.loads(lines[5])
    assert event["event"] == "audit.checkpoint"
    event["signature"] = event["signature"][:10] + ("A" if event["signature"][10] != "A" else "B") + \
        event["signature"][11:]
    lines[5] = json.dumps(event, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(rechained(lines, 5)))

    assert verify([path]).ok
    problems = verify([path], verifier).problems
    assert (problems[0].where.line, problems[0].kind, problems[0].message) == (
        6, "checkpoint", "its signature does not verify: the checkpoint was forged or changed")
    # the later checkpoints signed the heads before the forgery, so none vouches for the chain any more
    assert [(p.where.line, p.kind) for p in problems[1:]] == [(12, "checkpoint"), (15, "checkpoint"),
                                                              (15, "unsigned")]


def test_checkpoints_of_another_key_or_none_at_all_are_not_vouched_for(tmp_path: Path) -> None:
    signed, unsigned = tmp_path / "signed.jsonl", tmp_path / "unsigned.jsonl"
    signed_log(signed)
    written(unsigned)
    other = CheckpointVerifier(Ed25519PrivateKey.generate().public_key())

    kinds = {p.kind for p in verify([signed], other).problems}
    assert kinds == {"checkpoint", "unsigned"}
    assert [(p.where.line, p.kind) for p in verify([unsigned], other).problems] == [(12, "unsigned")]
