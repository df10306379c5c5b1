"""The message a call of a terminated run reads, with what an implicit run's operator can do about it.

A run the client named ends for good when a rule terminates it: a new task sends a new run id. An implicit
run (docs/runs.md) is the gateway's guess at a run, so its operator is told the three ways to a new one:
name runs, wait out ``runs.idle_timeout``, or have an admin end the run (``gateway sessions end``, after
which the client's next call starts a new implicit run).
"""

from __future__ import annotations

from gateway.core.durations import duration_text
from gateway.store.model import SessionState

__all__ = ["new_run_hint", "terminated_text"]


def new_run_hint(principal: str, run_id: str, idle_timeout: float) -> str:
    """How the operator of an implicit run starts a new one."""
    return (f"(For the operator: this run was started implicitly, as the client named no run id. To start a "
            f"new run, send a fresh run id in the X-Gateway-Session header or the MCP _meta \"gateway/session\"; "
            f"or wait {duration_text(idle_timeout)} (runs.idle_timeout) without a call; or have an admin run: "
            f"gateway sessions end {principal} {run_id})")


def terminated_text(session: SessionState, message: str, idle_timeout: float) -> str:
    """``message`` as a terminated run's call reads it: for an implicit run, with ``new_run_hint`` once."""
    if not session.implicit:
        return message
    hint = new_run_hint(session.principal, session.id, idle_timeout)
    if hint in message:
        return message
    return f"{message}\n\n{hint}" if message else hint
