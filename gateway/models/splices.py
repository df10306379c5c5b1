"""What the agent never saw, put back: the calls resolved server-side before a response it got.

A refused or skipped call, and a gateway-run call, never reach the agent, so the conversation it sends
next lacks them. The gateway keeps each such exchange under the first tool-call id of the response that
followed it, and puts it back before the item carrying that call when the conversation comes again: the
model then sees its own refused calls and their refusals, and does not make them again unknowingly.
Which ids an item carries is its API's (``Dialect.call_ids``).

``Handed`` remembers the calls handed to the agent, so a result whose call the conversation lacks (a
Responses conversation chained upstream by ``previous_response_id``) is still read as that tool's.
Both are kept in memory, bounded (the oldest go first); after a restart a conversation simply lacks them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.models.dialects.base import HandedOut, Json

__all__ = ["Handed", "Splices"]

Key = tuple[str, str, str]
V = TypeVar("V")


class _Bounded(Generic[V]):
    """(principal, run, call id) → a value; the oldest go first past ``kept``."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._found: OrderedDict[Key, V] = OrderedDict()

    def put(self, key: Key, value: V) -> None:
        self._found[key] = value
        self._found.move_to_end(key)
        while len(self._found) > self._kept:
            self._found.popitem(last=False)

    def get(self, key: Key) -> V | None:
        return self._found.get(key)


class Splices:
    """(principal, run, first returned tool-call id) → the items resolved before that response."""

    def __init__(self, kept: int) -> None:
        self._found: _Bounded[list[Json]] = _Bounded(kept)

    def keep(self, principal: str, run: str, first_id: str, resolved: list[Json]) -> None:
        """Remember ``resolved`` as what came before the response whose first returned call is ``first_id``."""
        if resolved:
            self._found.put((principal, run, first_id), resolved)

    def expand(self, principal: str, run: str, items: list[Json],
               call_ids: Callable[[Json], tuple[str, ...]]) -> list[Json]:
        """The conversation with every exchange the agent did not see put back in place."""
        out: list[Json] = []
        for item in items:
            ids = call_ids(item) if isinstance(item, dict) else ()
            if ids:
                out.extend(self._found.get((principal, run, ids[0])) or [])
            out.append(item)
        return out


class Handed:
    """(principal, run, call id) → the call the agent was given."""

    def __init__(self, kept: int) -> None:
        self._found: _Bounded[HandedOut] = _Bounded(kept)

    def keep(self, principal: str, run: str, call_id: str, call: HandedOut) -> None:
        """Remember a call handed to the agent."""
        self._found.put((principal, run, call_id), call)

    def lookup(self, principal: str, run: str) -> Callable[[str], HandedOut | None]:
        """The calls handed out in one run, by id."""
        return lambda call_id: self._found.get((principal, run, call_id))
