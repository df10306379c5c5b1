"""A call as a frontend hands it in, and the one outcome it gets back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.values import printable, text
from gateway.policy.call import Principal
from gateway.upstreams.base import ToolProgress
from gateway.upstreams.client_requests import ClientChannel
from gateway.upstreams.registry import ExposedTool

__all__ = ["CallOutcome", "CallRequest", "Progress", "call_id_of", "gave_call_id", "id_text", "iteration_of",
           "new_call_id"]

# The largest agent-loop iteration taken as given; anything else reads as not given.
_MAX_ITERATION = 2**31 - 1

# A frontend's way to tell a waiting caller what is happening (MCP progress notifications).
Progress = Callable[[str], Awaitable[None]]


def new_call_id() -> str:
    """A fresh call id for callers that did not give one."""
    return uuid.uuid4().hex


def id_text(value: Any) -> str:
    """An id a caller named, as text: a string as itself (the gateway admits it or not), anything else as JSON.

    Never Python's ``str()``, which would make ``{"a":1}`` into ``{'a': 1}`` and null into ``None``.
    """
    return value if isinstance(value, str) else text(printable(value))


def call_id_of(value: Any) -> str:
    """The call id a caller gave, as text, or a fresh one when it gave none."""
    return new_call_id() if value is None or value == "" else id_text(value)


def gave_call_id(value: Any) -> bool:
    """Whether a caller named its call (``call_id_of`` makes one up otherwise)."""
    return not (value is None or value == "")


def iteration_of(value: Any) -> int | None:
    """The agent-loop iteration a frontend was given (None when absent, not a whole number, or out of range:
    the pipeline then uses the number of calls the run has made, docs/runs.md)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_ITERATION:
        return None
    return value


@dataclass(slots=True)
class CallRequest:
    """One tool call from an agent."""

    tool: str
    arguments: dict[str, Any]
    principal: Principal
    session_id: str
    call_id: str = field(default_factory=new_call_id)
    iteration: int | None = None  # None: the client gave none; the run's call count is used
    progress: Progress | None = None
    frontend: str = "mcp"
    wait_seconds: float | None = None  # how long the caller will wait for an approval (None: until expiry)
    holds_connection: bool = True  # the caller waits on an open connection (not an MCP task): held calls count
    elicit: Any = None  # a frontend's way to ask the end user directly (MCP elicitation), if it has one
    refused: str | None = None  # why the frontend could not read the call: it is refused, and audited
    # False when the gateway made the call id up: a retry is then recognised by its run, tool and
    # arguments instead (see gateway/approvals/gate.py).
    call_id_given: bool = True
    run_client: str | None = None  # set when session_id is an implicit run: the client it was made for
    upstream_progress: ToolProgress | None = None  # where the upstream's own progress notifications go, if anywhere
    # The tool itself, for a tool the registry does not hold (the model proxy's agent-run tools,
    # gateway/models/client_tools.py); None: the registry's tool of that name.
    exposed: ExposedTool | None = None
    timeout: float | None = None  # the tool's run may take this long instead of the call timeout (an MCP task's)
    task_id: str | None = None  # the MCP task the call runs as, named in its audit events
    # The caller's client, for what an upstream asks it while the call runs (sampling, elicitation, roots, logs).
    client: ClientChannel | None = None
    traceparent: str | None = None  # the client's W3C trace context (header or MCP _meta), checked where it is used
    # When the gateway took the call in (UNIX time): a retry that came in before a run-bound approval let
    # go of its key still belongs to it (gateway/approvals/gate.py).
    received_ts: float = field(default_factory=time.time)
    # The caller's verified bearer token (``Identity.token``, a JWT caller only), for an upstream whose
    # credentials are exchanged on the caller's behalf (gateway/upstreams/credentials.py). Only the upstream
    # step reads it: it is in no audit event, no policy input, no repr and no error.
    caller_token: str | None = field(default=None, repr=False, compare=False)


@dataclass(slots=True)
class CallOutcome:
    """What the model sees: MCP's CallToolResult fields plus the gateway's decision."""

    call_id: str
    decision: str
    is_error: bool
    content: list[dict[str, Any]]
    structured: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    pending_approval: str | None = None  # set when the caller stopped waiting for an approval
    # Decide-only (``Gateway.decide``): the arguments an admitted call goes back to its caller with, to run itself.
    admitted: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    def to_rest(self) -> dict[str, Any]:
        """The REST frontend's response body."""
        return {"call_id": self.call_id, "decision": self.decision, "is_error": self.is_error,
                "content": self.content, "structured": self.structured, "meta": self.meta}
