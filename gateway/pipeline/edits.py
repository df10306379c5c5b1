"""An approver's edit of a held call's arguments, in the pipeline's terms.

    judge_edit     before an edited approval is recorded (the approver API): the edited arguments checked as an
                   agent's are (values, size, the input schema's types), then decided by the request-stage
                   policies in force for the same principal, run and tool as the held call, then the final
                   arguments checked against the input schema; the approvals service refuses the edit unless the
                   verdict is allow or approve (an edit can never turn a refused call into an allowed one)
    redecider      what the gate asks when the edited approval is claimed: the edited call decided again on the
                   held call's own request-stage input (it runs only if that gives the approved final arguments)
    released       the call and decision the edited call runs with, on the record (``trace.edit``)
    with_note      what the agent reads: a leading text block saying the arguments were edited, and ``_meta``
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from gateway.core.values import door_problem, problem
from gateway.observe.observer import CallObserver
from gateway.pipeline.approvals import EditAsk, EditedCall, Redecide, ReleasedEdit
from gateway.pipeline.audit import Redactor
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.deciding import evaluate, noted, request_stage_call
from gateway.pipeline.flow_step import usage_now
from gateway.pipeline.request import CallOutcome, CallRequest
from gateway.pipeline.results import META, schema_text
from gateway.pipeline.settings import CallSettings
from gateway.policy.call import ToolCall
from gateway.policy.catalog import CLIENT_UPSTREAM
from gateway.policy.decision import Decision, Verdict
from gateway.reload.holder import PolicyHolder
from gateway.store.base import SessionStore
from gateway.upstreams.registry import ToolRegistry

__all__ = ["EDITED", "EDITED_ARGS", "EDIT_NOTE", "judge_edit", "redecider", "released", "with_note"]

# What the agent reads first in the result of a call an approver edited (``{arguments}``: the approver's, redacted).
EDIT_NOTE = "Note: an approver edited the arguments of this call before it ran. It ran with: {arguments}"
EDITED = f"{META}edited"  # _meta: true on the result of a call an approver edited
EDITED_ARGS = f"{META}edited_args"  # _meta: the approver's arguments (redacted as the decision log redacts them)

# The verdicts under which the final arguments go on to the tool (so they must fit its input schema).
_GOES_ON = frozenset({Verdict.ALLOW, Verdict.APPROVE})


async def judge_edit(policies: PolicyHolder, registry: ToolRegistry, store: SessionStore, settings: CallSettings,
                     ask: EditAsk) -> EditedCall:
    """The request-stage decision on the edited arguments for the held call, or why they cannot be decided.

    Raises ``StoreUnavailable`` when the run cannot be read."""
    principal, run, name, upstream, call_id, arguments = \
        ask.principal, ask.run, ask.tool, ask.upstream, ask.call_id, ask.arguments
    tool = registry.get(name)
    if upstream == CLIENT_UPSTREAM or tool is None or tool.upstream.name != upstream:
        return EditedCall(None, f"The tool {name} of upstream {upstream or '?'} is not available to decide the edit.")
    if (why := door_problem(call_id, run, arguments)) is not None:
        return EditedCall(None, f"The edited arguments were refused: {why}.")
    if len(json.dumps(arguments, default=str)) > settings.max_argument_bytes:
        return EditedCall(None, f"The edited arguments are too large (over {settings.max_argument_bytes} bytes).")
    wrong = [p for p in tool.schema_errors(arguments) if not p.structural]
    if wrong:
        return EditedCall(None, schema_text(wrong))
    session = await store.find_session(principal.key, run)
    if session is None:
        return EditedCall(None, f"The run {run} of this call is no longer known, so the edit cannot be decided.")
    if session.terminated:
        return EditedCall(None, f"The run {run} of this call has ended, so the edit cannot be decided.")
    policy_set = policies.current
    usage, windows = await usage_now(store, principal.key, policy_set)
    request = CallRequest(tool=name, arguments=arguments, principal=principal, session_id=run, call_id=call_id,
                          frontend="approvals")
    call = request_stage_call(request, tool, session, usage, settings.env, windows)
    decision = evaluate(policy_set, call)
    if decision.verdict in _GOES_ON:
        if decision.rewritten and (why := problem(decision.args, where="/arguments")) is not None:
            return EditedCall(None, f"The policies' rewrite of the edited arguments was refused: {why}.")
        if problems := tool.schema_errors(decision.args):
            return EditedCall(None, f"After the policies' rewrites: {schema_text(problems)}")
    return EditedCall(decision)


def redecider(policies: PolicyHolder, call: ToolCall) -> Redecide:
    """The held call with other arguments, decided by the policies in force then, on the held call's own input."""

    def redecide(arguments: dict[str, Any]) -> Decision:
        return evaluate(policies.current, replace(call, args=arguments))

    return redecide


def released(trace: CallTrace, call: ToolCall, edit: ReleasedEdit, observer: CallObserver) -> tuple[ToolCall,
                                                                                                   Decision]:
    """The call and decision an edited approval runs with, on the call's record (its audit events say so)."""
    noted(trace, edit.decision, observer)
    trace.edit = {"edited_args": edit.arguments, "final_args": edit.decision.args, "by": edit.by}
    if trace.approval is not None:
        trace.approval["edited_by"] = edit.by
    return replace(call, args=edit.arguments), edit.decision


def with_note(outcome: CallOutcome, edit: ReleasedEdit, redactor: Redactor) -> CallOutcome:
    """``outcome`` with the note the agent (and its model) reads first, and the facts in ``_meta``."""
    shown = redactor(edit.arguments)
    note = EDIT_NOTE.format(arguments=json.dumps(shown, ensure_ascii=False, sort_keys=True))
    outcome.content = [{"type": "text", "text": note}, *outcome.content]
    outcome.meta[EDITED], outcome.meta[EDITED_ARGS] = True, shown
    return outcome

