"""What an agent chaining with ``previous_response_id`` needs the gateway to remember of the responses it gave.

The upstream keeps each answer under its id; the agent holds the ids the gateway showed it. Two things differ
from what the upstream holds, and are put right when the agent chains on such an id:

- **Renamed.** A stream is held to the id ``response.created`` named, the first answer's; when the gateway
  then answered that answer's calls itself and asked again, the upstream holds the conversation under the
  last answer's id. A chain on the first is sent on from the last.
- **Unseen answers.** A turn with calls the agent runs and calls the gateway answered (refused, skipped, not
  run) reaches the agent with the first only, so its outputs answer only those; the upstream, which holds
  every call of the answer, would refuse a chain that leaves any unanswered. The gateway's answers are kept
  under the answer's id and sent first in the chained request's ``input``: the model also reads why its
  other calls did not run.

Both are kept in memory, bounded (the oldest go first); after a restart the upstream refuses such a chain as
it would any chain with unanswered calls.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from gateway.core.limits import MODEL_SPLICES_KEPT
from gateway.models.dialects.base import Answered, Json
from gateway.models.dialects.responses_wire import OUTPUT

__all__ = ["chained_on", "keep_unseen", "renamed", "unseen_on"]

V = TypeVar("V")


class _Kept(Generic[V]):
    """Response id -> a value, at most ``kept`` of them (the oldest go first)."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._values: OrderedDict[str, V] = OrderedDict()

    def put(self, key: str, value: V) -> None:
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self._kept:
            self._values.popitem(last=False)

    def get(self, key: str) -> V | None:
        return self._values.get(key)


_RENAMED: _Kept[str] = _Kept(MODEL_SPLICES_KEPT)
_UNSEEN: _Kept[list[Json]] = _Kept(MODEL_SPLICES_KEPT)


def renamed(shown: str, real: str) -> None:
    """The agent was shown ``shown`` for the conversation the upstream holds as ``real``."""
    _RENAMED.put(shown, real)


def chained_on(previous: Any) -> Any:
    """The upstream id an agent's ``previous_response_id`` stands for."""
    return (_RENAMED.get(previous) or previous) if isinstance(previous, str) else previous


def keep_unseen(answer_id: Any, answered: Sequence[Answered]) -> None:
    """The outputs of the calls of answer ``answer_id`` that the gateway answered and the agent never saw."""
    if isinstance(answer_id, str) and answered:
        _UNSEEN.put(answer_id, [{"type": OUTPUT, "call_id": a.call.id, "output": a.text} for a in answered])


def unseen_on(previous: Any) -> list[Json]:
    """The outputs to send first in a request chained on upstream id ``previous`` (none for an id not kept)."""
    return list(_UNSEEN.get(previous) or []) if isinstance(previous, str) else []
