"""A set binds the run's history (and its other flow fields) only when one of its expressions may read it (binding
64 entries costs more than the rest of a decision); what policies read is the same either way."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gateway.policy import check_policies
from gateway.policy.call import SessionInfo, ToolCall, ToolInfo
from gateway.policy.decision import Verdict

HISTORY = [{"tool": "mail_read", "verdict": "allow", "rule": "", "labels": [], "time": "2026-12-02T10:00:00Z"}]


def _set(tmp_path: Path, engine: str, when: str):  # type: ignore[no-untyped-def]
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""\
        policy: p
        rules:
          - id: r
            when: '{when}'
            action: reject
        """))
    policy_set, problems = check_policies([tmp_path], engine)
    assert policy_set is not None, problems
    return policy_set


def _call() -> ToolCall:
    return ToolCall(ToolInfo("mail_send"), session=SessionInfo("run", calls=3, history=list(HISTORY)))


@pytest.mark.parametrize("when, reads", [
    ("session.calls > 2", False),
    ('session.history.exists(h, h.tool == "mail_read")', True),
    ('session["history"].size() > 0', True),
    ("size(session) > 100 || session.calls > 2", True),  # the whole map: it could reach the history
])
def test_history_is_bound_only_when_an_expression_may_read_it(tmp_path: Path, engine: str, when: str,
                                                               reads: bool) -> None:
    policy_set = _set(tmp_path, engine, when)

    assert policy_set.reads_history is reads
    assert policy_set.cel_input(_call())["session"].get("history") == (HISTORY if reads else None)
    assert policy_set.decide(_call()).verdict is Verdict.REJECT  # each rule fires on what it reads


@pytest.mark.parametrize("when, bound", [
    ("session.calls > 2", {"calls"}),
    ('session.calls > 2 && session.id != ""', {"calls", "id"}),
    ("has(session.rejected) && session.calls > 2", {"calls", "rejected"}),
    ('session.tallies.size() >= 0 && session.calls > 2', {"calls", "tallies", "seen"}),  # bound together
    ("size(session) > 100 || session.calls > 2", {"id", "calls", "calls_by_tool", "rejected", "started_at",
                                                   "implicit", "labels", "tallies", "seen", "history"}),
])
def test_a_set_binds_only_the_session_fields_it_may_read(tmp_path: Path, engine: str, when: str,
                                                          bound: set[str]) -> None:
    policy_set = _set(tmp_path, engine, when)

    assert set(policy_set.cel_input(_call())["session"]) == bound
    assert policy_set.decide(_call()).verdict is Verdict.REJECT
