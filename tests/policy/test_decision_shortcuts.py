"""The decision path's shortcuts (issue 12) give the answers the plain path gives, on both engines.

- A rule's ``when`` and ``messageExpression`` run as one program when that gives a clear answer;
  every other case (an error, a wrong type, a null message) must fall back and say the same thing.
- Only the CEL inputs the matched rules read are built and bound; every input still reads right,
  and an expression that reads ``variables`` as a whole still sees it.
- An approval's per-call message copies every other field of the rule's requirement.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway.policy import ApprovalRequirement, Outcome, PolicySet, Verdict
from gateway.policy.evaluate import _requirement
from tests.conftest import make_call

_RULES = """
    policy: p
    variables:
      - name: big
        expression: 'has(args.amount) && args.amount > 100'
    rules:
      - id: approve-big
        tools: [pay]
        when: variables.big
        action: approve
        message: Big.
        messageExpression: '"Paying " + string(args.amount) + " to " + args.to'
        approval: {approvers: ["group:finance", self], timeout: 1h, on_timeout: allow, via: elicitation}
      - id: reject-flag
        tools: [pay]
        when: has(args.flag) && args.flag  # dyn: a string at run time is an error, not true
        action: reject
        messageExpression: 'args.note'
      - id: reject-null-note
        tools: [pay]
        when: has(args.nullnote)
        action: reject
        message: Fallback text.
        messageExpression: 'args.nullnote'
"""

# args → what the shortcut must agree with the plain path on (checked by comparing whole decisions)
_CASES: list[dict[str, Any]] = [
    {"amount": 5, "to": "bob"},  # nothing fires
    {"amount": 500, "to": "bob"},  # approve with its message
    {"amount": 500},  # approve fires, its message fails (no args.to): fallback text and the error
    {"amount": 500, "to": 7},  # message of the wrong type (string + int): an error, fallback text
    {"flag": "yes"},  # when is not a bool: a rule error, fail closed
    {"flag": True, "note": "flagged"},  # fires with the message
    {"flag": True, "note": 3},  # messageExpression gives an int: error, default text
    {"flag": True},  # messageExpression fails
    {"nullnote": None},  # message is null: not a string, so the plain path decides
]


def _plain(policy_set: PolicySet) -> PolicySet:
    """The same set with the one-program shortcut taken away from every rule."""
    policies = tuple(dataclasses.replace(p, rules=tuple(dataclasses.replace(r, when_message=None) for r in p.rules))
                     for p in policy_set.policies)
    return PolicySet(policy_set.engine, policies, policy_set.default, policy_set.revision, policy_set.files)


def _shape(decision: Any) -> dict[str, Any]:
    out = decision.to_dict()
    out.pop("elapsed_us")
    for rule in out["rules"]:
        rule.pop("elapsed_us")
    return out


def test_the_shortcut_is_compiled_for_a_rule_with_when_and_message(load):
    ps = load(_RULES)
    by_id = {r.id: r for r in ps.rules}
    assert by_id["p/approve-big"].when_message is not None
    assert by_id["p/reject-flag"].when_message is not None


@pytest.mark.parametrize("args", _CASES)
def test_when_and_message_in_one_program_decide_as_the_two_do(load, args):
    ps = load(_RULES)
    call = make_call("pay", args)
    assert _shape(ps.decide(call)) == _shape(_plain(ps).decide(call))


def test_the_shortcut_keeps_the_message_and_the_errors(load):
    ps = load(_RULES)
    d = ps.decide(make_call("pay", {"amount": 500, "to": "bob"}))
    assert (d.verdict, d.message) == (Verdict.APPROVE, "Paying 500 to bob")
    assert d.approvals[0].message == "Paying 500 to bob"
    d = ps.decide(make_call("pay", {"amount": 500}))
    assert (d.verdict, d.message) == (Verdict.APPROVE, "Big.")
    assert d.rules[0].error is not None and d.rules[0].error.startswith("messageExpression failed")
    d = ps.decide(make_call("pay", {"flag": "yes"}))
    assert d.verdict is Verdict.REJECT
    assert [r.outcome for r in d.rules if r.rule == "p/reject-flag"] == [Outcome.ERROR]
    d = ps.decide(make_call("pay", {"nullnote": None}))
    assert (d.verdict, d.message) == (Verdict.REJECT, "Fallback text.")


def test_every_input_reads_right_when_only_what_is_read_is_bound(load):
    ps = load("""
        policy: p
        default: allow
        rules:
          - id: tool
            when: tool.name == "t" && tool.annotations.readOnlyHint == true
            action: reject
            message: tool
          - id: principal
            when: principal.id == "alice" && "ops" in principal.groups
            action: reject
            message: principal
          - id: session
            when: session.calls == 3
            action: reject
            message: session
          - id: call
            when: call.id == "c-1"
            action: reject
            message: call
          - id: env
            when: env.stage == "prod"
            action: reject
            message: env
          - id: original
            when: original_args.x == 1
            action: reject
            message: original_args
    """)
    fields: dict[str, Any] = {"principal": {"id": "alice", "groups": ["ops"]}, "session": {"calls": 3},
                              "call": {"id": "c-1"}, "env": {"stage": "prod"}}
    d = ps.decide(make_call({"name": "t", "annotations": {"readOnlyHint": True}}, {"x": 1}, **fields))
    assert all(r.outcome is Outcome.FIRED for r in d.rules), [(r.rule, r.outcome, r.error) for r in d.rules]
    assert len(d.rules) == 6


def test_an_expression_reading_variables_as_a_whole_still_sees_them(load):
    ps = load("""
        policy: p
        rules:
          - id: sees-variables
            when: size(variables) == 0
            action: allow
    """)
    d = ps.decide(make_call("t", {}))
    assert (d.verdict, d.rules[0].outcome) == (Verdict.ALLOW, Outcome.FIRED), d.rules[0].error


def test_an_approval_message_keeps_every_other_field_of_the_requirement():
    template = ApprovalRequirement("p/r", "static", ("group:a", "bob"), 12.0, Verdict.ALLOW, "elicitation",
                                   valid_for_seconds=7.0, hold_seconds=3.0)
    assert _requirement(template, "per call") == dataclasses.replace(template, message="per call")
    assert _requirement(template, None) is template
