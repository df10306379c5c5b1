"""Group commit of intent records (audit.fsync on): concurrent calls share a write and an fsync, each
call resumes only once its own record is in the file, and a record that cannot be written fails alone."""

from __future__ import annotations

import asyncio
import json
import resource
from pathlib import Path

import pytest
from audit_support import strict_lines as lines

from gateway.core.errors import AuditWriteError
from gateway.pipeline.audit import AuditLog
from gateway.pipeline.audit_verify import verify


async def durable_then_look(log: AuditLog, path: Path, n: int) -> bool:
    """Write event ``n`` durably; whether its line was in the file the moment the write returned."""
    await log.write_durable({"event": "call.intent", "n": n, "pad": "x" * 200})
    # Another batch may be half-way through its write this moment (the writer thread does not stop for us):
    # only the lines already whole count here; the file is read strictly once every write is done.
    whole = path.read_bytes().rpartition(b"\n")[0]
    return any(json.loads(line)["n"] == n for line in whole.split(b"\n") if line)


async def test_concurrent_intents_share_flushes_and_each_waits_for_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, fsync=True)
    try:
        assert log.group is not None
        seen = await asyncio.gather(*[durable_then_look(log, path, n) for n in range(60)])
        assert all(seen)  # no caller went on before its record was in the file
        assert log.group.lines == 60
        assert log.group.batches < 60  # flushes were shared
        assert sorted(int(str(e["n"])) for e in lines(path)) == list(range(60))
    finally:
        log.close()


async def test_with_group_commit_off_the_file_holds_the_same_records(tmp_path: Path) -> None:
    grouped, single = tmp_path / "grouped.jsonl", tmp_path / "single.jsonl"
    logs = [AuditLog(grouped, fsync=True), AuditLog(single, fsync=True, group_commit=False)]
    try:
        assert logs[1].group is None
        for log, path in zip(logs, (grouped, single), strict=True):
            assert all(await asyncio.gather(*[durable_then_look(log, path, n) for n in range(20)]))
        assert sorted(map(str, lines(grouped))) == sorted(map(str, lines(single)))
    finally:
        for log in logs:
            log.close()


def test_without_fsync_or_with_stdout_there_is_nothing_to_share(tmp_path: Path) -> None:
    assert AuditLog(tmp_path / "a.jsonl").group is None
    assert AuditLog(tmp_path / "b.jsonl", stdout=True, fsync=True).group is None
    assert AuditLog(None, stdout=True, fsync=True).group is None


async def test_a_record_that_cannot_be_written_fails_alone_and_leaves_no_fragment(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, fsync=True)
    await log.write_durable({"event": "first"})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # The file may grow by 2,000 bytes: the small records fit, the 20 kB one does not (EFBIG part-way).
    resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 2_000, hard))
    try:
        results = await asyncio.gather(
            log.write_durable({"event": "small", "n": 1}),
            log.write_durable({"event": "large", "n": 2, "pad": "y" * 20_000}),
            log.write_durable({"event": "small", "n": 3}),
            return_exceptions=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], AuditWriteError)
        assert [e["event"] for e in lines(path)] == ["first", "small", "small"]  # whole lines, no part of the large one
        await log.write_durable({"event": "after"})  # and the log works again
        assert lines(path)[-1]["event"] == "after"
        assert verify([path]).ok  # the record that failed left no gap in the chain
    finally:
        log.close()


async def test_a_caller_that_stops_waiting_does_not_stop_its_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, fsync=True)
    try:
        task = asyncio.ensure_future(log.write_durable({"event": "call.intent", "n": 7}))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await log.write_durable({"event": "later"})  # queued behind it: once this is durable, so is the first
        assert [e["event"] for e in lines(path)] == ["call.intent", "later"]
    finally:
        log.close()


def test_one_batch_with_a_bad_line_keeps_the_good_ones(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, fsync=True)
    log.write({"event": "first"})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 2_000, hard))
    try:
        outcomes = log.append_batch([b'{"event":"a"}\n', b'{"event":"big","pad":"' + b"z" * 20_000 + b'"}\n',
                                     b'{"event":"c"}\n'])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        log.close()
    assert outcomes[0] is None and outcomes[2] is None and isinstance(outcomes[1], AuditWriteError)
    assert [e["event"] for e in lines(path)] == ["first", "a", "c"]
    assert verify([path]).ok  # c follows a in the chain: the line that failed took no seq
