"""What the agent never saw, put back: the calls resolved server-side before a response it got.

A refused or skipped call, and a gateway-run call, never reach the agent, so the conversation it sends
next lacks them. The gateway keeps each such exchange under the tool-call ids of the response that
followed it, and puts it back before that assistant message when the conversation comes again: the
model then sees its own refused calls and their refusals, and does not make them again unknowingly.
Kept in memory, bounded (the oldest go first); after a restart a conversation simply lacks them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["Splices"]

Json = dict[str, Any]
Key = tuple[str, str, tuple[str, ...]]


def _ids(message: Json) -> tuple[str, ...]:
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return ()
    return tuple(str(c.get("id")) for c in calls if isinstance(c, dict))


class Splices:
    """(principal, run, returned tool-call ids) → the messages resolved before that response."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._found: OrderedDict[Key, list[Json]] = OrderedDict()

    def keep(self, principal: str, run: str, returned: Json, resolved: list[Json]) -> None:
        """Remember ``resolved`` as what came before the assistant message ``returned``."""
        ids = _ids(returned)
        if not ids or not resolved:
            return
        self._found[(principal, run, ids)] = resolved
        self._found.move_to_end((principal, run, ids))
        while len(self._found) > self._kept:
            self._found.popitem(last=False)

    def expand(self, principal: str, run: str, messages: list[Json]) -> list[Json]:
        """The conversation with every exchange the agent did not see put back in place."""
        out: list[Json] = []
        for message in messages:
            ids = _ids(message) if isinstance(message, dict) else ()
            if ids:
                out.extend(self._found.get((principal, run, ids), []))
            out.append(message)
        return out
