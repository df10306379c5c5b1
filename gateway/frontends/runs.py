"""Which agent run a call belongs to, the same for REST and both MCP protocol eras (docs/runs.md).

First match wins:

1. the ``X-Gateway-Session`` header; on REST the body's ``session_id`` comes before it;
2. MCP ``tools/call`` params ``_meta["gateway/session"]``;
3. the MCP session id (``Mcp-Session-Id``, the 2025-11-25 handshake era);
4. none given: the **implicit run** of (principal, client), which ends after ``runs.idle_timeout``
   without a call (gateway/store/implicit_runs.py).

The client of an implicit run is the MCP ``clientInfo`` ``name/version`` when the request carries it,
else the ``User-Agent`` header, else ``unknown``. In the 2025-11-25 era clientInfo comes from the
``initialize`` request of the MCP session; in the 2026-07-28 era (no protocol session) every request
may carry it in ``params._meta["io.modelcontextprotocol/clientInfo"]`` (the SDK's
``CLIENT_INFO_META_KEY``), which the SDK turns into ``ServerSession.client_params.client_info``.
Run ids are scoped to the principal: the store keys runs by (principal, id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.limits import MAX_RUN_CLIENT_CHARS
from gateway.pipeline.request import id_text
from gateway.store.base import SessionStore

__all__ = ["RUN_HEADER", "RUN_META", "Run", "client_of", "explicit_run_id", "resolve_run"]

RUN_HEADER = "x-gateway-session"
RUN_META = "gateway/session"
MCP_SESSION_HEADER = "mcp-session-id"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"  # mcp_types.CLIENT_INFO_META_KEY (2026-07-28)
UNKNOWN_CLIENT = "unknown"


@dataclass(frozen=True, slots=True)
class Run:
    """The run of one call: its id, and for an implicit run the client it was made for."""

    id: str
    client: str | None = None  # None: the client named the run

    @property
    def implicit(self) -> bool:
        """Whether the gateway made the run up."""
        return self.client is not None


def _given(value: Any) -> str | None:
    """A run id as given (any JSON value as text), or None when absent or empty."""
    if value is None or value == "":
        return None
    return id_text(value)


def explicit_run_id(headers: Mapping[str, str], meta: Mapping[str, Any] | None = None,
                    body_session_id: Any = None) -> str | None:
    """The run id the client named, in the documented order, or None."""
    for value in (body_session_id, headers.get(RUN_HEADER), (meta or {}).get(RUN_META),
                  headers.get(MCP_SESSION_HEADER)):
        found = _given(value)
        if found is not None:
            return found
    return None


def client_of(client_info: Any, headers: Mapping[str, str]) -> str:
    """The client's name for implicit runs: clientInfo ``name/version``, else User-Agent, else ``unknown``."""
    name = version = None
    if isinstance(client_info, Mapping):
        name, version = client_info.get("name"), client_info.get("version")
    elif client_info is not None:
        name, version = getattr(client_info, "name", None), getattr(client_info, "version", None)
    if isinstance(name, str) and name:
        found = f"{name}/{version}" if isinstance(version, str) and version else name
    else:
        found = headers.get("user-agent") or UNKNOWN_CLIENT
    printable = "".join(ch for ch in found if ch.isprintable())[:MAX_RUN_CLIENT_CHARS]
    return printable or UNKNOWN_CLIENT


async def resolve_run(store: SessionStore, principal: str, explicit: str | None, client: str) -> Run:
    """The call's run: the one the client named, else the current implicit run of (principal, client)."""
    if explicit is not None:
        return Run(explicit)
    return Run(await store.implicit_run(principal, client), client)
