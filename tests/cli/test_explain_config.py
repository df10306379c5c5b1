"""`gateway explain --config` applies the config's env, as the gateway does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def test_env_comes_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    call = tmp_path / "call.json"
    call.write_text(json.dumps({"tool": {"name": "notes_search", "annotations": {"readOnlyHint": True}},
                                "args": {"query": "x"}, "session": {"calls": 3}}))
    base = ["explain", "--policies", str(QUICKSTART / "policies"), "--call", str(call), "--format", "json"]

    # Without the config, env is empty: quickstart/call-budget cannot be evaluated and fails closed.
    assert main(base) == 0
    without = json.loads(capsys.readouterr().out)
    assert (without["decision"], without["decided_by"]) == ("reject", "quickstart/call-budget")

    assert main([*base, "--config", str(QUICKSTART / "gateway.yaml")]) == 0
    with_config = json.loads(capsys.readouterr().out)
    assert with_config["decision"] == "allow"
    budget = next(e for e in with_config["trace"] if e["rule"] == "quickstart/call-budget")
    assert budget["outcome"] == "not_fired"

    # the call file's own env still wins key by key
    call.write_text(json.dumps({"tool": "notes_search", "args": {"query": "x"}, "session": {"calls": 3},
                                "env": {"max_calls_per_session": 3}}))
    assert main([*base, "--config", str(QUICKSTART / "gateway.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "terminate"


def test_a_bad_config_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("policies: [p]\nenvv: {}\n")
    call = tmp_path / "call.json"
    call.write_text('{"tool": "t"}')
    assert main(["explain", "--policies", str(QUICKSTART / "policies"), "--call", str(call),
                 "--config", str(config)]) == 1
    assert "envv" in capsys.readouterr().err
