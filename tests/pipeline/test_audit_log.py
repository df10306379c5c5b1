"""The audit writer on real files: whatever the values, each event is one line of strict JSON, bounded
in size, written whole or not at all; a partial line left by a crash is cut off."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from audit_support import chained_lines, payload, strict_lines

from gateway.core.errors import AuditWriteError
from gateway.pipeline.audit import AuditLog


def compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


HOSTILE = {
    "nan": float("nan"),
    "infinities": [float("inf"), float("-inf")],
    "huge_int": 10**5000,
    "lone_surrogate": "a\ud800b",
    "surrogate_key": {"k\udc80": 1},
    "deep": nested(990),
    "unprintable": Unprintable(),
    "tuple_key": {(1, 2): "t"},
    "bytes": b"\xff\x00",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_value_json_cannot_hold_is_written_as_text_never_raised(tmp_path: Path, name: str) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.write({"call_id": name, "final_args": {"v": HOSTILE[name]}})
    log.write({"call_id": "after"})  # and the next event is a line of its own

    first, second = strict_lines(tmp_path / "audit.jsonl")
    assert (first["call_id"], second) == (name, {"call_id": "after"})
    shown = json.dumps(first["final_args"])
    expected = {"nan": '"NaN"', "infinities": '["Infinity", "-Infinity"]', "huge_int": '"<integer of 16610 bits>"',
                "lone_surrogate": r'"a\\ud800b"', "surrogate_key": r'{"k\\udc80": 1}', "deep": "nested deeper than",
                "unprintable": '"<Unprintable>"', "tuple_key": '{"(1, 2)": "t"}', "bytes": "b'\\\\xff\\\\x00'"}[name]
    assert expected in shown


def test_a_large_value_goes_in_as_a_digest_and_a_preview(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", max_value_bytes=4_096)
    memo = "m" * 10_000_000
    log.write({"call_id": "big", "final_args": {"to": "bob", "amount": 5, "memo": memo}, "verdict": "allow"})

    assert (tmp_path / "audit.jsonl").stat().st_size < 4_096 + 1_000
    (event,) = strict_lines(tmp_path / "audit.jsonl")
    args = event["final_args"]
    assert (args["to"], args["amount"], event["verdict"]) == ("bob", 5, "allow")  # the small members stay readable
    assert args["memo"] == {"truncated": True, "sha256": hashlib.sha256(compact(memo)).hexdigest(),
                            "bytes": len(memo) + 2, "preview": '"' + "m" * 511}


def test_the_whole_line_is_bounded_too(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", max_value_bytes=60_000, max_event_bytes=20_000)
    event = {"call_id": "wide", **{f"field_{i}": "v" * 50_000 for i in range(40)}}
    log.write(event)

    assert (tmp_path / "audit.jsonl").stat().st_size <= 20_001
    (written,) = strict_lines(tmp_path / "audit.jsonl")
    assert written["call_id"] == "wide"
    assert written["field_7"]["sha256"] == hashlib.sha256(compact("v" * 50_000)).hexdigest()


def test_a_partial_last_line_left_by_a_crash_is_cut_off_when_the_file_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    first = AuditLog(path)
    first.write({"call_id": "whole"})
    first.close()
    with path.open("ab") as file:  # the process died in the middle of its next line
        file.write(b'{"call_id":"cut off by a cra')
    AuditLog(path).write({"call_id": "next"})

    assert strict_lines(path) == [{"call_id": "whole"}, {"call_id": "next"}]
    whole, after = chained_lines(path)
    assert (after["chain"], after["seq"]) == (whole["chain"], 2)  # the chain goes on from the last whole line


def test_a_file_that_is_one_partial_line_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"call_id":"half')
    AuditLog(path).write({"call_id": "next"})

    assert strict_lines(path) == [{"call_id": "next"}]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_device_raises_audit_write_error_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.symlink_to("/dev/full")
    log = AuditLog(path)
    with pytest.raises(AuditWriteError, match="No space left"):
        log.write({"call_id": "lost"})

    path.unlink()  # the operator fixes it: the next write goes to a real file at the path
    log.write({"call_id": "kept"})
    assert strict_lines(path) == [{"call_id": "kept"}]


def test_a_renamed_or_deleted_file_is_reopened_at_its_path(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write({"n": 1})
    path.rename(tmp_path / "audit.jsonl.1")
    log.write({"n": 2})
    path.unlink()
    log.write({"n": 3})

    assert strict_lines(tmp_path / "audit.jsonl.1") == [{"n": 1}]
    assert strict_lines(path) == [{"n": 3}]


def test_a_new_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        AuditLog(tmp_path / "audit.jsonl").write({"n": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600


def test_stdout_mode_writes_the_same_lines(tmp_path: Path) -> None:
    stream = io.StringIO()
    log = AuditLog(None, stream=stream)
    log.write({"call_id": "out", "v": float("nan"), "s": "\udc80"})

    assert stream.getvalue().endswith("\n")
    assert payload(json.loads(stream.getvalue())) == {"call_id": "out", "v": "NaN", "s": "\\udc80"}


def test_fsync_mode_writes_each_event_through(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", fsync=True)
    for n in range(3):
        log.write({"n": n})
    log.close()
    assert strict_lines(tmp_path / "audit.jsonl") == [{"n": 0}, {"n": 1}, {"n": 2}]
