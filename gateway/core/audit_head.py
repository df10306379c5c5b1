"""The head of every audit event: the first fields of each line, the same four, always in this order.

    {"event": "call.outcome", "id": "<32 hex>", "time": "2026-12-01T23:41:07.123Z", "trace_id": "<32 hex>" | null, …}

``event`` says what happened, ``id`` names this event (a call's intent and outcome share one), ``time``
is when it was written, and ``trace_id`` is the W3C trace id of the request it belongs to: the call
span's when tracing is on, else the ``traceparent`` the client sent (when it is valid); null when there
is neither, or when the event belongs to no request (a reload, the approval sweeper). The rest of an
event's fields follow the head, as each kind of event defines them.

Every event goes through ``audit_head``, so a reader can rely on the head, and the trace id joins an
audit line to its trace and to the JSON log lines of the same call (gateway/observe/logs.py).
"""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["audit_head"]


def audit_head(kind: str, at: str, trace_id: str | None, audit_id: str | None = None) -> dict[str, Any]:
    """The first fields of an audit event of ``kind`` written at ``at`` (a fresh id unless ``audit_id``)."""
    return {"event": kind, "id": audit_id if audit_id is not None else uuid.uuid4().hex, "time": at,
            "trace_id": trace_id}
