"""The engine's input: one tool call described as plain typed values.

The engine sees exactly these; transports build them. ``to_cel`` gives the maps that CEL
expressions read (``tool``, ``principal``, ``session``, ``usage``, ``call``, ``result``, and ``request``,
``resource`` and ``prompt``, which say what kind of request is decided). Times are RFC 3339
strings; use ``timestamp(call.time)`` in CEL to compare them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from gateway.core.values import door_problem
from gateway.policy.decision import Stage

__all__ = ["ITEM_KINDS", "JWT_KEY_PREFIX", "PRINCIPAL_KINDS", "SESSION_FIELDS", "CallInfo", "ItemInfo", "Principal",
           "ResultInfo", "SessionInfo", "ToolCall", "ToolInfo", "UsageInfo", "jwt_key"]

# What a decision can be about (``request.kind``), and the MCP method behind each.
ITEM_KINDS: dict[str, str] = {"tool": "tools/call", "resource": "resources/read", "prompt": "prompts/get"}


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """The tool as the gateway exposes it."""

    name: str
    upstream: str = ""
    title: str = ""
    description: str = ""
    annotations: dict[str, Any] = field(default_factory=dict)
    pinned: bool = False  # it matches its entry in the tools lock (False when no lock is configured)
    schema_text: str = ""  # every title and description of its input schema (gateway/policy/schema_text.py)

    def to_cel(self) -> dict[str, Any]:
        """The ``tool`` map (its text with U+0000 as U+FFFD: the C++ engine would end a string there, and
        hide from policies what follows, which the model still reads)."""
        hints = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                 "openWorldHint": True}  # MCP's defaults for a tool that says nothing
        hints.update({k: v for k, v in self.annotations.items() if v is not None})
        return {"name": self.name, "upstream": self.upstream, "title": _nul_shown(self.title),
                "description": _nul_shown(self.description), "annotations": hints, "pinned": self.pinned,
                "schema_text": _nul_shown(self.schema_text)}


def _nul_shown(text: str) -> str:
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


@dataclass(frozen=True, slots=True)
class ItemInfo:
    """A resource or prompt as the gateway exposes it: what a read or get is decided about."""

    kind: str  # "resource" or "prompt"
    name: str  # the gateway's URI of a resource, the exposed name of a prompt
    upstream: str = ""
    upstream_name: str = ""  # the upstream's own URI or prompt name
    title: str = ""
    description: str = ""
    mime_type: str = ""
    method: str = ""  # the MCP method, when not the kind's usual one (resources/subscribe)

    def request_cel(self) -> dict[str, Any]:
        """The ``request`` map."""
        return {"kind": self.kind, "method": self.method or ITEM_KINDS[self.kind]}

    def resource_cel(self) -> dict[str, Any]:
        """The ``resource`` map (every field empty unless a resource is decided)."""
        if self.kind != "resource":
            return dict(_NO_RESOURCE)
        return {"uri": self.name, "upstream": self.upstream, "upstream_uri": self.upstream_name,
                "title": self.title, "description": self.description, "mimeType": self.mime_type}

    def prompt_cel(self) -> dict[str, Any]:
        """The ``prompt`` map (every field empty unless a prompt is decided)."""
        if self.kind != "prompt":
            return dict(_NO_PROMPT)
        return {"name": self.name, "upstream": self.upstream, "upstream_name": self.upstream_name,
                "title": self.title, "description": self.description}


_NO_RESOURCE = dict.fromkeys(("uri", "upstream", "upstream_uri", "title", "description", "mimeType"), "")
_NO_PROMPT = dict.fromkeys(("name", "upstream", "upstream_name", "title", "description"), "")
TOOL_REQUEST = {"kind": "tool", "method": "tools/call"}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling."""

    id: str = "anonymous"
    groups: tuple[str, ...] = ()
    claims: dict[str, Any] = field(default_factory=dict)
    # How the caller was recognised: "key" (an API key), "jwt" (a verified token) or "anonymous".
    kind: str = "key"
    issuer: str = ""  # the token's verified ``iss``; empty unless kind is "jwt"
    subject: str = ""  # the token's verified ``sub``; empty unless kind is "jwt"
    token_id_hash: str = ""  # SHA-256 hex of the token's ``jti`` (never the token); empty without one

    # What the gateway binds this caller's runs, sessions, usage, tasks and approvals to, computed once (it is
    # read several times per call): an API key's or the anonymous principal's id, exactly as before tokens
    # (stored rows stay theirs); for a token, its issuer and subject (``jwt_key``), so two issuers' ``sub:
    # alice`` share nothing and no token can take an API key principal's place (config ids may not start
    # with ``jwt:``).
    key: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", jwt_key(self.issuer, self.subject) if self.kind == "jwt" else self.id)

    def to_cel(self) -> dict[str, Any]:
        """The ``principal`` map."""
        return {"id": self.id, "groups": list(self.groups), "claims": self.claims, "issuer": self.issuer,
                "kind": self.kind}

    def to_record(self) -> dict[str, Any]:
        """Who called, as the decision log and stored requests write it: never a token, only the hash of its id.

        ``{id, groups, kind}``, and for a token also ``issuer``, ``subject`` and ``token_id_hash`` (when it
        had a ``jti``); ``from_record`` reads it back, and rows written before ``kind`` as API keys'.
        """
        out: dict[str, Any] = {"id": self.id, "groups": list(self.groups), "kind": self.kind}
        if self.kind == "jwt":
            out["issuer"], out["subject"] = self.issuer, self.subject
            if self.token_id_hash:
                out["token_id_hash"] = self.token_id_hash
        return out

    @classmethod
    def from_record(cls, data: Mapping[str, Any], claims: dict[str, Any] | None = None) -> Principal:
        """Back from ``to_record`` (``claims`` kept apart: the decision log writes them elsewhere)."""
        kind = str(data.get("kind") or "key")
        return cls(str(data["id"]), tuple(str(g) for g in data.get("groups") or ()), claims or {},
                   kind if kind in PRINCIPAL_KINDS else "key", str(data.get("issuer") or ""),
                   str(data.get("subject") or ""), str(data.get("token_id_hash") or ""))


# How a caller can be recognised (``principal.kind``).
PRINCIPAL_KINDS = ("key", "jwt", "anonymous")
# The binding key of a token's principal starts with this; a config principal id may not (gateway/config/load.py).
JWT_KEY_PREFIX = "jwt:"


@lru_cache(maxsize=4096)  # a few callers make most calls: quote once per (issuer, subject)
def jwt_key(issuer: str, subject: str) -> str:
    """``jwt:<issuer>:<subject>``, each percent-encoded whole (``:`` and ``/`` too), so the pair reads back
    unambiguously, the key holds no ``/`` (the admin API names it in a path) and is never a config id."""
    return f"{JWT_KEY_PREFIX}{quote(issuer, safe='')}:{quote(subject, safe='')}"


# The fields of the ``session`` map that hold what the run carries (gateway/policy/flow.py).
FLOW_FIELDS = frozenset({"labels", "tallies", "seen", "history"})
# Every field of the ``session`` map.
SESSION_FIELDS = frozenset({"id", "calls", "calls_by_tool", "rejected", "started_at", "implicit", *FLOW_FIELDS})


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Counters of the agent session the call belongs to (before this call)."""

    id: str = ""
    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    started_at: str = ""
    implicit: bool = False  # the gateway made the run up: the client named none (docs/runs.md)
    labels: Sequence[str] = field(default_factory=list)  # every label added in the run so far (gateway/policy/flow.py)
    tallies: Mapping[str, float | int] = field(default_factory=dict)  # tally id -> the run's value
    seen: Mapping[str, Sequence[str]] = field(default_factory=dict)  # distinct tally id -> the values kept
    history: Sequence[Mapping[str, Any]] = field(default_factory=list)  # last calls, oldest first (flow.py)

    def to_cel(self, fields: frozenset[str] = SESSION_FIELDS) -> dict[str, Any]:
        """The ``session`` map, with the fields named in ``fields`` (every one by default: a set gives only those its
        expressions may read, since the engine converts each field it is given, read or not)."""
        if fields is SESSION_FIELDS or fields == SESSION_FIELDS:
            return {"id": self.id, "calls": self.calls, "calls_by_tool": self.calls_by_tool, "rejected": self.rejected,
                    "started_at": self.started_at, "implicit": self.implicit, "labels": _listed(self.labels),
                    "tallies": _mapped(self.tallies), "seen": _plain_seen(self.seen) if self.seen else {},
                    "history": _listed(self.history)}
        return {name: _SESSION_VALUES[name](self) for name in fields}


def _listed(value: Sequence[Any]) -> list[Any]:
    return value if type(value) is list else list(value)


def _mapped(value: Mapping[str, Any]) -> dict[str, Any]:
    return value if type(value) is dict else dict(value)


# How each ``session`` field is read from a SessionInfo (``SessionInfo.to_cel``).
_SESSION_VALUES: dict[str, Callable[[SessionInfo], Any]] = {
    "id": lambda s: s.id, "calls": lambda s: s.calls, "calls_by_tool": lambda s: s.calls_by_tool,
    "rejected": lambda s: s.rejected, "started_at": lambda s: s.started_at, "implicit": lambda s: s.implicit,
    "labels": lambda s: _listed(s.labels), "tallies": lambda s: _mapped(s.tallies),
    "seen": lambda s: _plain_seen(s.seen) if s.seen else {}, "history": lambda s: _listed(s.history),
}


@dataclass(frozen=True, slots=True)
class UsageInfo:
    """The principal's calls over one configured rolling window, across all its runs (before this call)."""

    calls: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    tallies: Mapping[str, float | int] = field(default_factory=dict)  # tally id -> its value over the window
    seen: Mapping[str, Sequence[str]] = field(default_factory=dict)  # distinct tally id -> values in the window

    def to_cel(self) -> dict[str, Any]:
        """One entry of the ``usage`` map."""
        return {"calls": self.calls, "calls_by_tool": self.calls_by_tool, "rejected": self.rejected,
                "tallies": self.tallies if type(self.tallies) is dict else dict(self.tallies),
                "seen": _plain_seen(self.seen) if self.seen else {}}


# The engines take plain lists and dicts only (a tuple anywhere in a map fails its whole activation), while a
# run's labels, tallies and seen values may come as any Sequence or Mapping: the maps above make them plain, at the
# cost of a type check when they already are (history entries must be plain: flow.history_entry makes them so).
def _plain_seen(value: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    return {k: v if type(v) is list else list(v) for k, v in value.items()}


@dataclass(frozen=True, slots=True)
class CallInfo:
    """This call's identity within the agent loop."""

    id: str = ""
    iteration: int = 0
    time: str = ""

    def to_cel(self) -> dict[str, Any]:
        """The ``call`` map."""
        return {"id": self.id, "iteration": self.iteration, "time": self.time}


@dataclass(frozen=True, slots=True)
class ResultInfo:
    """A tool's result, as response-stage rules see it."""

    is_error: bool = False
    text: str = ""
    structured: Any = None
    content: list[dict[str, Any]] = field(default_factory=list)

    def to_cel(self) -> dict[str, Any]:
        """The ``result`` map."""
        return {"is_error": self.is_error, "text": self.text, "structured": self.structured,
                "content": self.content}

    @classmethod
    def from_cel(cls, data: dict[str, Any]) -> ResultInfo:
        """Back from the (possibly rewritten) map."""
        return cls(bool(data.get("is_error", False)), str(data.get("text") or ""),
                   data.get("structured"), list(data.get("content") or []))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Everything the engine needs to decide one call at one stage."""

    tool: ToolInfo
    args: dict[str, Any] = field(default_factory=dict)
    principal: Principal = field(default_factory=Principal)
    session: SessionInfo = field(default_factory=SessionInfo)
    call: CallInfo = field(default_factory=CallInfo)
    env: dict[str, Any] = field(default_factory=dict)
    stage: Stage = Stage.REQUEST
    result: ResultInfo | None = None
    original_args: dict[str, Any] | None = None  # defaults to args
    usage: Mapping[str, UsageInfo] = field(default_factory=dict)  # window name (config usage_windows) -> counts
    item: ItemInfo | None = None  # a resource read or prompt get; None: a tool call

    def refused_at_door(self) -> str | None:
        """The message the gateway refuses this call with (``invalid_input``) before any policy sees it, or
        None: `gateway explain` and `gateway test` decide only calls the gateway would let in."""
        why = door_problem(self.call.id, self.session.id, self.args)
        return None if why is None else f"The call was refused: {why}."

    def item_cel(self) -> dict[str, Any]:
        """The ``request``, ``resource`` and ``prompt`` maps."""
        if self.item is None:
            return {"request": dict(TOOL_REQUEST), "resource": dict(_NO_RESOURCE), "prompt": dict(_NO_PROMPT)}
        return {"request": self.item.request_cel(), "resource": self.item.resource_cel(),
                "prompt": self.item.prompt_cel()}

    def usage_cel(self) -> dict[str, Any]:
        """The ``usage`` map."""
        return {name: info.to_cel() for name, info in self.usage.items()}
