"""A run's state folded call by call: what the next call's ``session`` shows, from a case or from a logged event."""

from __future__ import annotations

from gateway.core.limits import MAX_RUN_LABELS, RUN_HISTORY_KEPT
from gateway.policy.call import SessionInfo
from gateway.policy.flow import LabelOverflow, Tallies
from gateway.testing.run_state import RunState
from tests.conftest import make_call

ZERO = Tallies({"spent": 0.0, "people": 0}, {"people": []})


def test_the_session_shows_every_declared_tally_and_the_logged_counters() -> None:
    state = RunState(["untrusted"], Tallies({"spent": 5.0}), [], calls=3, calls_by_tool={"t": 3}, rejected=1)
    base = SessionInfo("run-1", 9, {"x": 9}, 2, "2026-01-01T00:00:00Z")
    shown = state.session(base, ZERO)
    assert (shown.id, shown.calls, shown.calls_by_tool, shown.rejected) == ("run-1", 3, {"t": 3}, 1)
    assert (shown.labels, shown.tallies, shown.seen) == (["untrusted"], {"spent": 5.0, "people": 0}, {"people": []})
    logged = state.session(base, ZERO, counters=False)
    assert (logged.calls, logged.calls_by_tool, logged.rejected) == (9, {"x": 9}, 2)


def test_a_logged_session_starts_a_run_with_the_new_sets_tallies_only() -> None:
    state = RunState.from_logged({"labels": ["secret", 3], "tallies": {"spent": 7.5, "gone": 1, "odd": True},
                                  "seen": {"people": ["a"], "gone": ["b"]}, "history": [{"tool": "t"}, "x"],
                                  "calls": 4}, ["spent", "people"])
    assert (state.labels, state.tallies.values, state.tallies.seen) == (["secret", "3"], {"spent": 7.5},
                                                                          {"people": ["a"]})
    assert (state.history, state.calls) == ([{"tool": "t"}], 0)
    assert RunState.from_logged({"labels": "x", "tallies": [], "seen": 5, "history": {}}, []).labels == []


def test_history_keeps_the_newest_and_labels_fail_closed() -> None:
    state = RunState()
    for n in range(RUN_HISTORY_KEPT + 3):
        state.record(f"t{n}", "allow", None, [], "2026-01-01T00:00:00Z", rejected=n % 2 == 1)
    assert len(state.history) == RUN_HISTORY_KEPT and state.history[0]["tool"] == "t3"
    assert (state.calls, state.rejected, state.history[-1]["rule"]) == (RUN_HISTORY_KEPT + 3, 33, "")
    state.add_labels([f"l{n}" for n in range(MAX_RUN_LABELS)])
    state.add_labels(["l0"])  # already carried: nothing new
    try:
        state.add_labels(["one-more"])
    except LabelOverflow:
        pass
    else:
        raise AssertionError("a run past its label limit must refuse")
    assert len(state.labels) == MAX_RUN_LABELS


def test_an_admitted_call_adds_its_tallies_on_the_final_arguments(load) -> None:  # type: ignore[no-untyped-def]
    policy_set = load("""
        policy: p
        tallies:
          - {id: spent, tools: [pay], sum: double(args.amount)}
          - {id: people, tools: [pay], distinct: args.to}
        rules:
          - id: halve
            tools: [pay]
            action: rewrite
            rewrite: {set: {amount: double(args.amount) / 2.0}}
    """)
    state = RunState()
    call = make_call("pay", {"amount": 10, "to": "a"})
    decision = policy_set.decide(call)
    assert state.admit(policy_set, call, decision) is None
    assert (state.tallies.values, state.tallies.seen) == ({"spent": 5.0, "people": 1}, {"people": ["a"]})
    refused = state.admit(policy_set, make_call("pay", {"amount": -1, "to": "b"}),
                          policy_set.decide(make_call("pay", {"amount": -1, "to": "b"})))
    assert refused is not None and refused.decided_by == "tally:spent"
    assert state.tallies.values == {"spent": 5.0, "people": 1}  # nothing added by a refused call
    assert state.admit(policy_set, make_call("other"), policy_set.decide(make_call("other"))) is None
