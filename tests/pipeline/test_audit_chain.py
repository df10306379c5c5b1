"""The decision log's hash chain as the writer keeps it, on real files: every line names the one before,
the chain goes on across restarts, rotations (by size, by rename, by copytruncate) and workers, checkpoints
are signed, and a start whose chain cannot be continued stops, or begins a new chain when told to."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
import shutil
import tracemalloc
from pathlib import Path

import pytest
from audit_support import chained_lines
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.cli.workers import worker_audit_file
from gateway.core.errors import AuditChainBroken, AuditLogInUse, AuditWriteError
from gateway.pipeline.audit import AuditLog, ChainSettings, Rotation
from gateway.pipeline.audit_chain import CHAIN_STARTED_EVENT, CHECKPOINT_EVENT, checkpoint_message
from gateway.pipeline.audit_keys import CheckpointSigner, CheckpointVerifier
from gateway.pipeline.audit_verify import verify

PAD = "p" * 400  # an event of about 550 bytes: a 64 KiB file holds about 120


def write(log: AuditLog, first: int, count: int) -> None:
    for n in range(first, first + count):
        log.write({"event": "call.outcome", "n": n, "pad": PAD})


def keys() -> tuple[CheckpointSigner, CheckpointVerifier]:
    private = Ed25519PrivateKey.generate()
    return CheckpointSigner(private), CheckpointVerifier(private.public_key())


# --- the fields -----------------------------------------------------------------------------------------------


def test_every_line_names_the_one_before_it_by_the_sha256_of_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    write(log, 0, 3)
    log.write({})  # an event with no field of its own still carries the chain's
    log.close()

    raw = path.read_bytes().splitlines(keepends=True)
    events = chained_lines(path)
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert len({e["chain"] for e in events}) == 1
    assert events[0]["prev"] is None
    assert [e["prev"] for e in events[1:]] == [hashlib.sha256(line).hexdigest() for line in raw[:-1]]
    assert list(events[0])[:2] == ["event", "n"]  # the event's own fields first, as they were given
    assert verify([path]).ok


def test_an_event_cannot_set_the_chain_fields_itself(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write({"event": "x", "seq": 99, "prev": "f" * 64, "chain": "mine"})
    log.close()
    (event,) = chained_lines(path)
    assert (event["seq"], event["prev"], event["chain"] != "mine") == (1, None, True)


def test_a_write_that_fails_takes_no_place_in_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    write(log, 0, 2)
    path.rename(path.with_name("audit.jsonl.1"))
    path.mkdir()  # nowhere to write: the event is refused
    with pytest.raises(AuditWriteError):
        log.write({"event": "call.intent", "n": "refused"})
    path.rmdir()
    write(log, 2, 1)
    log.close()
    assert [e["seq"] for e in chained_lines(path)] == [3]  # not 4: the refused event took no seq
    assert verify([path.with_name("audit.jsonl.1"), path]).ok


def test_a_restart_continues_the_chain_of_the_files_last_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    for first in (0, 3, 6):  # three processes, one after the other
        log = AuditLog(path)
        write(log, first, 3)
        log.close()
    events = chained_lines(path)
    assert [e["seq"] for e in events] == list(range(1, 10))
    assert len({e["chain"] for e in events}) == 1
    assert verify([path]).ok


def test_stdout_alone_is_a_chain_of_its_own_each_start(tmp_path: Path) -> None:
    import io

    stream = io.StringIO()
    log = AuditLog(None, stream=stream)
    write(log, 0, 2)
    out = tmp_path / "stdout.jsonl"
    out.write_text(stream.getvalue())
    assert [e["seq"] for e in chained_lines(out)] == [1, 2]
    assert verify([out]).ok


# --- rotation ---------------------------------------------------------------------------------------------------


def test_rotation_by_size_keeps_one_chain_across_the_files(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, rotation=Rotation(65_536))
    write(log, 0, 300)
    log.close()

    files = [path.with_name("audit.jsonl.2"), path.with_name("audit.jsonl.1"), path]
    assert all(f.stat().st_size <= 65_536 for f in files) and not path.with_name("audit.jsonl.3").exists()
    events = [e for f in files for e in chained_lines(f)]
    assert [e["n"] for e in events] == list(range(300))  # oldest first, none lost
    for older, newer in itertools.pairwise(files):  # a file's first event names the last of the one before
        assert chained_lines(newer)[0]["prev"] == hashlib.sha256(older.read_bytes().splitlines(True)[-1]).hexdigest()
    shuffled = random.sample(files, len(files))
    report = verify(shuffled)
    assert report.ok and report.events == 300 and len(report.chains) == 1
    assert report.chains[0].files == [str(f) for f in files]  # put back in the chain's order


def test_rotation_keeps_only_as_many_files_as_asked(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, rotation=Rotation(65_536, keep=1))
    write(log, 0, 400)
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.jsonl", "audit.jsonl.1"]
    assert not verify([path.with_name("audit.jsonl.1"), path]).ok  # its start is gone...
    assert verify([path.with_name("audit.jsonl.1"), path], partial=True).ok  # ...and what is left is whole


@pytest.mark.parametrize("how", ["rename", "copytruncate"])
def test_a_rotation_by_someone_else_keeps_the_chain(tmp_path: Path, how: str) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    for number in (2, 1):
        write(log, 0, 3)
        if how == "rename":
            path.rename(path.with_name(f"audit.jsonl.{number}"))
        else:
            shutil.copyfile(path, path.with_name(f"audit.jsonl.{number}"))
            os.truncate(path, 0)
    write(log, 0, 3)
    log.close()
    report = verify([path, path.with_name("audit.jsonl.1"), path.with_name("audit.jsonl.2")])
    assert report.ok and report.events == 9


def test_a_start_after_a_rotation_takes_up_the_chain_of_file_1(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    write(log, 0, 3)
    log.close()
    path.rename(path.with_name("audit.jsonl.1"))  # logrotate ran while the gateway was down
    log = AuditLog(path)
    write(log, 3, 2)
    log.close()
    assert [e["seq"] for e in chained_lines(path)] == [4, 5]
    assert verify([path.with_name("audit.jsonl.1"), path]).ok


def test_two_workers_rotated_twice_verify_each_chain_on_its_own(tmp_path: Path) -> None:
    """What `gateway serve --workers 2` writes (gateway/cli/workers.py): each worker its own file and chain."""
    configured = tmp_path / "audit.jsonl"
    paths = [Path(worker_audit_file(str(configured), slot)) for slot in (0, 1)]
    assert [p.name for p in paths] == ["audit.worker-0.jsonl", "audit.worker-1.jsonl"]
    workers = [AuditLog(p, rotation=Rotation(65_536)) for p in paths]
    for n in range(600):  # interleaved, as the kernel spreads the connections
        workers[n % 2].write({"event": "call.outcome", "n": n, "pad": PAD})
    workers[0].close()
    workers[0] = AuditLog(paths[0], rotation=Rotation(65_536))  # worker 0 dies and is started again in its slot
    write(workers[0], 600, 10)
    for worker in workers:
        worker.close()

    files = sorted(tmp_path.iterdir())
    assert len(files) == 6  # FILE, FILE.1, FILE.2 for each worker
    report = verify(random.sample(files, len(files)))
    assert report.ok, report.shown
    assert (report.events, len(report.chains)) == (610, 2)
    assert sorted(c.events for c in report.chains) == [300, 310]


# --- signed checkpoints -----------------------------------------------------------------------------------------


def test_checkpoints_sign_the_head_every_n_events_and_when_the_log_closes(tmp_path: Path) -> None:
    signer, verifier = keys()
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, chain=ChainSettings(signer, every=4))
    write(log, 0, 10)
    log.close()

    events = chained_lines(path)
    checkpoints = [e for e in events if e["event"] == CHECKPOINT_EVENT]
    assert [c["seq"] for c in checkpoints] == [5, 10, 13]  # after 4 events, 4 more, and the last 2 at close
    for checkpoint in checkpoints:
        head = checkpoint["head"]
        assert (head["seq"], head["sha256"], checkpoint["key"]) == (checkpoint["seq"] - 1, checkpoint["prev"],
                                                                   signer.key_id)
        assert verifier.verify(checkpoint_message(checkpoint["chain"], head["seq"], head["sha256"]),
                               checkpoint["signature"])
    report = verify([path], verifier)
    assert report.ok and (report.chains[0].signed, report.chains[0].signed_through) == (3, 13)


# --- the start --------------------------------------------------------------------------------------------------


def test_a_file_whose_last_line_is_not_a_chained_event_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    write(log, 0, 2)
    log.close()
    with path.open("ab") as file:
        file.write(b'{"event":"call.outcome","n":"written by hand"}\n')

    with pytest.raises(AuditChainBroken) as raised:
        AuditLog(path)
    assert str(raised.value).startswith(f"{path}: error[audit-chain-broken]: the audit chain cannot be continued")
    assert "audit.on_broken_chain: start_new" in str(raised.value)
    assert raised.value.code == "audit-chain-broken"


def test_start_new_begins_a_new_chain_that_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"\x00\x17 not even JSON\n")
    with caplog.at_level(logging.WARNING, logger="gateway.audit"):
        log = AuditLog(path, chain=ChainSettings(on_broken="start_new"))
    assert "a new audit chain begins" in caplog.text
    write(log, 0, 2)
    log.close()

    started, *calls = [json.loads(line) for line in path.read_bytes().splitlines()[1:]]  # after the broken one
    assert (started["event"], started["seq"], started["prev"], started["file"]) == (CHAIN_STARTED_EVENT, 1, None,
                                                                                    str(path))
    assert "is not a chained event" in started["reason"]
    assert [(c["seq"], c["chain"]) for c in calls] == [(2, started["chain"]), (3, started["chain"])]
    report = verify([path])  # the line that broke the chain is still reported; the new chain is whole
    assert [(p.where.line, p.kind) for p in report.problems] == [(1, "not-chained")]
    assert [c.intact for c in report.chains] == [True]


def test_a_second_writer_on_one_file_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    first = AuditLog(path)
    write(first, 0, 1)
    with pytest.raises(AuditLogInUse, match=r"error\[audit-log-in-use\]: another process is writing"):
        AuditLog(path)
    first.close()
    AuditLog(path).close()  # once the first has let go, the file can be taken up


def test_verifying_reads_a_stream_in_flat_memory(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    for n in range(3_000):
        log.write({"event": "call.outcome", "n": n, "pad": "m" * 2_000})
    log.close()
    assert path.stat().st_size > 6_000_000
    tracemalloc.start()
    try:
        report = verify([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok and report.events == 3_000
    assert peak < 1_000_000, f"{peak} bytes at the peak: the file is not read as a stream"
