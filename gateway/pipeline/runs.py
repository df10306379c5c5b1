"""Which agent run a call belongs to, the same for REST and both MCP protocol eras (docs/runs.md).

First match wins:

1. the ``X-Gateway-Session`` header; on REST the body's ``session_id`` comes before it;
2. MCP ``tools/call`` params ``_meta["gateway/session"]``;
3. none given: the **implicit run** of (principal, client), which ends after ``runs.idle_timeout``
   without a call (gateway/store/implicit_runs.py).

The client of an implicit run is every signal the request gives of who is calling: the MCP ``clientInfo``
``name/version``, the model proxy's conversation (how it began: ``conversation_of``) and the ``User-Agent``
header, or ``unknown`` when there is none. In the 2025-11-25 era clientInfo comes from the ``initialize``
request of the MCP session; in the 2026-07-28 era (no protocol session) every request may carry it in
``params._meta["io.modelcontextprotocol/clientInfo"]`` (the SDK's ``CLIENT_INFO_META_KEY``), which the SDK
turns into ``ServerSession.client_params.client_info``.

The MCP session (``Mcp-Session-Id``) is not a run: clients open one per call (LangChain's MCP adapters)
or per invocation (the Inspector CLI) as readily as one per run. It narrows the implicit run instead: a
session that carries more than one call owns its run, and the next session starts a new one
(gateway/store/implicit_runs.py). Run ids are scoped to the principal: the store keys runs by (principal, id).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.limits import MAX_RUN_CLIENT_CHARS
from gateway.pipeline.request import id_text
from gateway.store.base import SessionStore

__all__ = ["MCP_SESSION_HEADER", "RUN_HEADER", "RUN_META", "Run", "client_of", "conversation_of",
           "explicit_run_id", "resolve_run"]

RUN_HEADER = "x-gateway-session"
RUN_META = "gateway/session"
MCP_SESSION_HEADER = "mcp-session-id"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"  # mcp_types.CLIENT_INFO_META_KEY (2026-07-28)
UNKNOWN_CLIENT = "unknown"
# The roles of a chat conversation's opening that name it: the instructions, up to the first user message.
_OPENING_ROLES = frozenset({"system", "developer"})


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
    for value in (body_session_id, headers.get(RUN_HEADER), (meta or {}).get(RUN_META)):
        found = _given(value)
        if found is not None:
            return found
    return None


def _printable(value: str) -> str:
    return "".join(ch for ch in value if ch.isprintable())


def client_of(client_info: Any, headers: Mapping[str, str], conversation: str | None = None) -> str:
    """The client's signal for implicit runs: clientInfo ``name/version``, the conversation, the User-Agent
    (those given, joined by ``; ``), else ``unknown``. The User-Agent goes last, so that when the whole is
    cut to ``MAX_RUN_CLIENT_CHARS`` it is the part cut."""
    name = version = None
    if isinstance(client_info, Mapping):
        name, version = client_info.get("name"), client_info.get("version")
    elif client_info is not None:
        name, version = getattr(client_info, "name", None), getattr(client_info, "version", None)
    parts = []
    if isinstance(name, str) and _printable(name):
        parts.append(f"{name}/{version}" if isinstance(version, str) and version else name)
    if conversation is not None:
        parts.append(f"conversation {conversation}")
    parts.append(headers.get("user-agent") or "")
    found = "; ".join(p for p in map(_printable, parts) if p)[:MAX_RUN_CLIENT_CHARS]
    return found or UNKNOWN_CLIENT


def conversation_of(messages: Any) -> str | None:
    """How a chat conversation began, as a short digest: its system and developer messages up to and with
    the first user message. Every request of one conversation repeats them; a new task starts a new one.
    None when the request has no such opening."""
    if not isinstance(messages, list):
        return None
    opening: list[Any] = []
    for message in messages:
        if not isinstance(message, Mapping):
            break
        opening.append([message.get("role"), message.get("content")])
        if message.get("role") not in _OPENING_ROLES:
            break
    if not opening:
        return None
    digest = hashlib.sha256(json.dumps(opening, sort_keys=True, default=repr).encode()).hexdigest()
    return digest[:16]


async def resolve_run(store: SessionStore, principal: str, explicit: str | None, client: str,
                      session: str | None = None) -> Run:
    """The call's run: the one the client named, else the current implicit run of (principal, client), which
    the call's protocol ``session`` (``Mcp-Session-Id``, if any) narrows."""
    if explicit is not None:
        return Run(explicit)
    return Run(await store.implicit_run(principal, client, session), client)
