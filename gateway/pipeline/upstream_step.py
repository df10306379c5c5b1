"""The upstream step of a call: the approved arguments to the tool's upstream, within the call's timeout.

Every failure is mapped here to what the model reads and what the audit event records: arguments the
upstream's request cannot carry (not sent), no credential for the upstream (not sent; the agent is told
why), a service not reached (provably not sent: an approval stays valid), any other upstream failure, a
caller gone mid-run. The call runs on behalf of its caller's client and token (``calling_client``,
``acting_for``): only what the upstream needs of them is read, by the upstream.
"""

from __future__ import annotations

import asyncio
import time

from gateway.core.errors import InvalidArgumentsError, UpstreamCredentialsError, UpstreamError, UpstreamNotReached
from gateway.core.limits import MAX_AUDIT_ERROR_CHARS
from gateway.observe.observer import CallObserver
from gateway.pipeline.call_trace import CallTrace
from gateway.pipeline.request import CallOutcome
from gateway.pipeline.results import TOOL_FAILED, refusal
from gateway.policy.decision import Decision
from gateway.upstreams.base import ToolResult
from gateway.upstreams.client_requests import calling_client
from gateway.upstreams.credentials import acting_for
from gateway.upstreams.registry import ExposedTool

__all__ = ["call_upstream"]


async def call_upstream(trace: CallTrace, tool: ExposedTool, decision: Decision, call_timeout: float,
                        observer: CallObserver) -> ToolResult | CallOutcome:
    """The tool's result, or the refusal the call ends with; ``trace.upstream`` says which, for the audit.

    Raises ``CancelledError`` when the caller went away mid-run (``trace.upstream`` then says so)."""
    request = trace.request
    started = time.perf_counter()
    timeout = call_timeout if request.timeout is None else request.timeout
    timeout = min(timeout, tool.timeout) if tool.timeout else timeout  # an upstream's own timeout always holds
    try:
        with calling_client(request.client), acting_for(request.caller_token):
            result = await observer.upstream(tool.upstream.name, tool.upstream.call(
                tool.spec.name, decision.args, timeout, request.upstream_progress))
    except InvalidArgumentsError as exc:  # arguments the upstream's request cannot carry safely
        trace.upstream = {"status": "not_called", "error": str(exc)}
        return refusal(request.call_id, "invalid_arguments", f"The arguments were refused: {exc}")
    except UpstreamCredentialsError as exc:  # no token for the upstream, so nothing sent: the agent reads why
        trace.upstream = {"status": "failed", "reached": False, "error": str(exc)[:MAX_AUDIT_ERROR_CHARS]}
        return refusal(request.call_id, "tool_failed", f"{exc} The tool did not run.")
    except UpstreamNotReached as exc:  # provably never sent (see errors.UpstreamNotReached)
        trace.upstream = {"status": "failed", "reached": False, "error": str(exc)[:MAX_AUDIT_ERROR_CHARS]}
        return refusal(request.call_id, "tool_failed", TOOL_FAILED)
    except UpstreamError as exc:
        trace.upstream = {"status": "failed", "error": str(exc)[:MAX_AUDIT_ERROR_CHARS]}
        return refusal(request.call_id, "tool_failed", TOOL_FAILED)
    except asyncio.CancelledError:  # the caller went away mid-run: its intent must not stand alone
        trace.upstream = {"status": "cancelled"}
        raise
    finally:
        trace.upstream_ms = (time.perf_counter() - started) * 1e3
    trace.upstream = {"status": "ok", "is_error": result.is_error}
    return result
