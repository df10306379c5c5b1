"""What the model sees for each way a call can end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.core.limits import MAX_ARGUMENT_PROBLEMS
from gateway.pipeline.request import CallOutcome
from gateway.policy.call import ResultInfo
from gateway.upstreams.argument_errors import ArgumentProblem
from gateway.upstreams.base import ToolResult, text_result

__all__ = ["APPROVAL_KEPT", "AUDIT_FAILED", "AUDIT_FAILED_AFTER_RUN", "CANCELLED", "HANDED_OUT", "INTERRUPTED",
           "META", "NOT_REACHED", "POLICY_FAILED", "REFUSED_AT_RELEASE", "RESULT_WITHHELD", "STORE_UNAVAILABLE",
           "TOOL_FAILED", "UNHELD", "UNRECORDED", "admitted", "as_result_info", "from_response_stage", "handed_out",
           "needs_client", "pending", "refusal", "schema_refusal", "schema_text", "skipped", "tool_result",
           "unavailable"]

# Keys of the `_meta` the gateway adds to every result (MCP reserves un-prefixed names).
META = "gateway/"
# On the refusal of an approved call its policies refused when it was released (a cap filled while it waited):
# the refusing rule. Stored with the approval, whose execution it marks "refused_at_release" (not "ran").
REFUSED_AT_RELEASE = f"{META}refused_at_release"


def _meta(call_id: str, decision: str, **extra: Any) -> dict[str, Any]:
    meta = {f"{META}call_id": call_id, f"{META}decision": decision}
    meta.update({f"{META}{k}": v for k, v in extra.items() if v is not None})
    return meta


def refusal(call_id: str, decision: str, message: str, **extra: Any) -> CallOutcome:
    """An ``isError`` result whose text is a message meant for the model."""
    return CallOutcome(call_id, decision, True, [{"type": "text", "text": message}], None,
                       _meta(call_id, decision, **extra))


def schema_text(problems: Sequence[ArgumentProblem]) -> str:
    """"The arguments do not match the tool's input schema: …", naming each argument and what it needs (bounded)."""
    listed = "; ".join(p.text for p in problems[:MAX_ARGUMENT_PROBLEMS])
    more = f" (and {len(problems) - MAX_ARGUMENT_PROBLEMS} more)" if len(problems) > MAX_ARGUMENT_PROBLEMS else ""
    return f"The arguments do not match the tool's input schema: {listed}{more}."


def schema_refusal(call_id: str, problems: Sequence[ArgumentProblem]) -> CallOutcome:
    """Arguments that do not fit the tool's input schema, refused naming each argument and what it needs."""
    return refusal(call_id, "invalid_arguments",
                   f"{schema_text(problems)} The tool did not run: correct the arguments and call it again.")


_ASKS = {"sampling": "its model (MCP sampling)", "elicitation": "its user (MCP elicitation)",
         "roots": "its roots (MCP roots)"}


def needs_client(call_id: str, tool: str, missing: Sequence[str]) -> CallOutcome:
    """A tool that asks its caller's client for what this client did not declare: refused, and not run."""
    asked = " and ".join(_ASKS.get(kind, kind) for kind in missing)
    return refusal(call_id, "client_unsupported",
                   f"The tool {tool} needs to ask the client for {asked}, which this client did not declare, so it"
                   " was not run. Use another tool, or a client that supports this.")


def pending(call_id: str, message: str, approval_id: str, expires_at: str | None) -> CallOutcome:
    """A held call's answer once the hold is over: a normal result (not ``isError``) the model reads and acts
    on by calling again; ``_meta`` marks it pending (frameworks hide an error's text by default: MAF).

    The instruction is the only thing the model is given: no ``structuredContent``. MAF
    (``structured_first``) and pydantic-ai hand the model the structured content instead of the text
    whenever there is one, so JSON there would bury the instruction in a field. The facts a program reads
    (pending, approval id, expiry) are in ``_meta``, MCP's place for data about a result."""
    return CallOutcome(call_id, "pending", False, [{"type": "text", "text": message}], None,
                       _meta(call_id, "pending", pending=True, approval_id=approval_id, expires_at=expires_at),
                       pending_approval=approval_id)


HANDED_OUT = f"{META}handed_out"  # _meta: when an approved agent-run call was handed out (it is never again)


def handed_out(call_id: str, tool: str, approval_id: str, at: str) -> CallOutcome:
    """What every retry bound to an approval gets once its agent-run call was handed out.

    For a tool the agent runs itself the handed-out call *is* the execution, so the stored outcome of the
    approval is this notice, never the call: a second copy of the call would be a second run.
    """
    message = (f"This call to {tool} was already approved and handed out at {at} (approval {approval_id}) "
               "for the agent to run, once; it is not handed out again. The same call made again later is a "
               "new request for approval.")
    return CallOutcome(call_id, "approve", False, [{"type": "text", "text": message}], None,
                       _meta(call_id, "approve", handed_out=at, approval_id=approval_id))


def skipped(call_id: str, value: Any) -> CallOutcome:
    """A successful synthetic result; ``_meta`` marks that the tool did not run."""
    result = text_result(value if value is not None else {"skipped": True})
    return CallOutcome(call_id, "skip", False, result.content, result.structured,
                       _meta(call_id, "skip", skipped=True))


def tool_result(call_id: str, decision: str, result: ToolResult, **extra: Any) -> CallOutcome:
    """The tool's own result (its ``isError`` kept)."""
    return CallOutcome(call_id, decision, result.is_error, result.content, result.structured,
                       _meta(call_id, decision, **extra))


def as_result_info(result: ToolResult) -> ResultInfo:
    """How response-stage rules see a result."""
    return ResultInfo(result.is_error, result.text, result.structured, result.content)


def from_response_stage(original: ToolResult, rewritten: dict[str, Any]) -> ToolResult:
    """Back from the result map after response-stage rewrites.

    Changed content blocks win; otherwise a changed ``text`` replaces the text blocks.
    """
    before = as_result_info(original).to_cel()
    content = rewritten.get("content", before["content"])
    if content == before["content"] and rewritten.get("text", before["text"]) != before["text"]:
        others = [b for b in before["content"] if b.get("type") != "text"]
        content = [{"type": "text", "text": str(rewritten.get("text") or "")}, *others]
    structured = rewritten.get("structured", before["structured"])
    return ToolResult(list(content or []), structured, bool(rewritten.get("is_error", before["is_error"])))



# What the model reads when the gateway, not a policy, ended the call.
TOOL_FAILED = "The tool failed. Try again later or use another tool."
POLICY_FAILED = "The policies could not be evaluated for this call, so it was refused."
INTERRUPTED = "The approved call was interrupted while it ran; it may or may not have taken effect."
CANCELLED = "The call was cancelled while the tool ran; it may or may not have taken effect."
UNHELD = "The call stopped waiting for its approval before it was decided; it did not run."
APPROVAL_KEPT = "The approval is still valid: call again to run it."
NOT_REACHED = f"The tool's service could not be reached, so the approved call was not sent. {APPROVAL_KEPT}"
AUDIT_FAILED = "The call could not be recorded, so it was not run."
STORE_UNAVAILABLE = ("The gateway's database could not be read, so this run's limits could not be checked and the "
                     "call was not run. Try again shortly.")
UNRECORDED = "The call was cancelled while its intent was being recorded; it did not run."
AUDIT_FAILED_AFTER_RUN = "The tool ran, but the call could not be recorded, so its result is withheld."
RESULT_WITHHELD = "The result was withheld by policy."  # a response-stage reject without a message


def unavailable(tool: str) -> str:
    """An approved call whose tool went away before it ran."""
    return f"The tool {tool} is no longer available, so the approved call was not run."


def admitted(call_id: str, decision: str, arguments: dict[str, Any], **extra: Any) -> CallOutcome:
    """A call admitted to be run by its caller (decide-only): the arguments it goes with, nothing run here."""
    return CallOutcome(call_id, decision, False, [], None, _meta(call_id, decision, **extra), admitted=arguments)

