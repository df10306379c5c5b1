"""The decision log's hash chain: every line names the one before it, so a line changed, removed,
inserted or moved shows, and checkpoints sign the chain's head.

Each line ends with three fields, spliced into the bytes the event was encoded to (never encoded twice)::

    {"event": …, …the event…, "chain": "<32 hex>", "seq": 41, "prev": "<64 hex>"}

- ``chain`` names the writer's chain: one per file lineage, kept across the writer's restarts (the
  gateway continues the chain of its file's last line) and across rotations;
- ``seq`` counts the chain's events from 1, with no gaps;
- ``prev`` is the hex SHA-256 of the chain's previous line exactly as written (its bytes, newline
  included); null on a chain's first event.

A checkpoint (``audit.checkpoint``) is a chained event whose Ed25519 signature covers the head it
follows: the chain, the seq and the SHA-256 of the line before it, as the bytes of
``checkpoint_message``. Since every line names the one before, a valid checkpoint vouches for every
event of its chain up to it.

``ChainWriter`` is the writer's side: it seals each encoded line (under the log's lock) and moves on
only when told the line is in the file (``commit``), so a line that could not be written leaves no gap.
"""

from __future__ import annotations

import hashlib
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.core.limits import AUDIT_CHECKPOINT_EVERY
from gateway.pipeline.audit_keys import CheckpointSigner

__all__ = ["CHAIN_FIELDS", "CHAIN_STARTED_EVENT", "CHECKPOINT_EVENT", "CHECKPOINT_PREFIX", "ChainWriter", "Link",
           "checkpoint_message", "line_digest", "new_chain_id", "parse_link"]

CHECKPOINT_EVENT = "audit.checkpoint"
CHAIN_STARTED_EVENT = "audit.chain_started"
CHAIN_FIELDS = ("chain", "seq", "prev")  # the writer's own fields: an event never sets them
# Every line starts with the audit head (gateway/core/audit_head.py), so a checkpoint is known by its start.
CHECKPOINT_PREFIX = b'{"event":"' + CHECKPOINT_EVENT.encode() + b'",'

# The chain fields as the writer puts them: the last members of the line's object.
_SUFFIX = re.compile(rb'[{,]"chain":"([0-9a-f]{32})","seq":([1-9][0-9]{0,19}),"prev":(?:null|"([0-9a-f]{64})")}\n?\Z')
_SUFFIX_SPAN = 200  # bytes from the end of a line that hold the chain fields, with room to spare

Encode = Callable[[dict[str, Any]], bytes]


@dataclass(frozen=True, slots=True)
class Link:
    """Where a line says it is: its chain, its seq and the SHA-256 of the line before it (None: the first)."""

    chain: str
    seq: int
    prev: str | None


def parse_link(line: bytes) -> Link | None:
    """The chain fields at the end of ``line``; None when it does not end with them (not a chained event)."""
    found = _SUFFIX.search(line, max(0, len(line) - _SUFFIX_SPAN))
    if found is None:
        return None
    chain, seq, prev = found.groups()
    return Link(chain.decode(), int(seq), None if prev is None else prev.decode())


def line_digest(line: bytes) -> str:
    """What the next line's ``prev`` names: the hex SHA-256 of this line's bytes, newline included."""
    return hashlib.sha256(line).hexdigest()


def new_chain_id() -> str:
    """A fresh chain id (32 hex digits)."""
    return uuid.uuid4().hex


def checkpoint_message(chain: str, seq: int, digest: str) -> bytes:
    """The bytes a checkpoint signs: the chain's head (its id, the head's seq and the head line's SHA-256)."""
    return f"gateway-audit-checkpoint/1\n{chain}\n{seq}\n{digest}".encode()


_State = tuple[int, bytes, int, list[dict[str, Any]]]  # seq, the next line's prev field, mark, opening


class ChainWriter:
    """One writer's chain: its head, and each line sealed with its chain fields (call under the log's lock).

    ``seal`` returns the bytes to write: the line with its fields, after the opening events still to be
    written (a new chain's ``audit.chain_started``), and followed by a checkpoint when one is due. The head
    moves on with it: a write that fails calls ``undo``, so the line takes no place in the chain (the
    common path, a write that lands, pays nothing more). ``snapshot``/``restore`` undo a whole batch.
    """

    def __init__(self, chain: str, seq: int = 0, digest: str | None = None, *, encode: Encode,
                 signer: CheckpointSigner | None = None, every: int = AUDIT_CHECKPOINT_EVERY,
                 opening: Sequence[dict[str, Any]] = ()) -> None:
        self.chain = chain
        self.seq = seq
        self.signer = signer
        self.every = every
        self._encode = encode
        self._opening = list(opening)
        self._mark = seq  # the seq of the last checkpoint (this process's: a restart counts from where it began)
        self._tag = b',"chain":"' + chain.encode() + b'","seq":'
        # The end of the next line, prev included: kept ready, so sealing a line is one join and one hash.
        self._tail = b',"prev":null}\n' if digest is None else _tail(digest)
        self._undo = self.snapshot()
        self._tail_before: bytes | None = None
        self._due = self._next_due()

    @property
    def since(self) -> int:
        """Events since the last checkpoint."""
        return self.seq - self._mark

    @property
    def head(self) -> tuple[int, str | None]:
        """The seq and SHA-256 of the chain's last line (0 and None before its first)."""
        return self.seq, None if self.seq == 0 else self._tail[9:73].decode()

    def seal(self, line: bytes) -> bytes:
        """``line`` (an encoded event, with its newline) with its chain fields, and what must come with it."""
        seq = self.seq
        if seq >= self._due:  # an opening event to write first, or a checkpoint due after this line
            return self._seal_with_others(line)
        self._tail_before = tail = self._tail  # undone by stepping back: cheaper than a snapshot per line
        self.seq = seq = seq + 1
        data = b"".join((line[:-2], self._tag if len(line) > 3 else self._tag[1:], b"%d" % seq, tail))
        self._tail = _TAIL % hashlib.sha256(data).hexdigest().encode()
        return data

    def seal_opening(self) -> bytes | None:
        """The opening events still to be written, sealed; None when there are none."""
        return self._seal_with_others(None) if self._opening else None

    def seal_checkpoint(self) -> bytes | None:
        """A checkpoint of the head now (as the gateway stops), sealed; None without a signer or new events."""
        if self.signer is None or self.since == 0:
            return None
        return self._seal_with_others(None, checkpoint=True)

    def undo(self) -> None:
        """The bytes of the last ``seal`` are not in the file: the head goes back to before it."""
        if self._tail_before is None:
            self.restore(self._undo)
        else:  # one line sealed on its own
            self.seq, self._tail, self._tail_before = self.seq - 1, self._tail_before, None

    def snapshot(self) -> _State:
        """The chain's state, to ``restore`` if what follows must be undone."""
        return self.seq, self._tail, self._mark, list(self._opening)

    def restore(self, state: _State) -> None:
        """Back to a ``snapshot``: the lines sealed since are not in the file."""
        self.seq, self._tail, self._mark, opening = state
        self._opening = list(opening)
        self._tail_before = None
        self._due = self._next_due()

    def _next_due(self) -> int:
        """The seq from which a line cannot be sealed alone: at once while opening events wait, else the line
        before a checkpoint is due (never, without a signer)."""
        if self._opening:
            return -1
        return self._mark + self.every - 1 if self.signer is not None else sys.maxsize

    def _seal_with_others(self, line: bytes | None, checkpoint: bool = False) -> bytes:
        self._undo, self._tail_before = self.snapshot(), None
        lines = [self._encode(event) for event in self._opening]
        self._opening = []
        if line is not None:
            lines.append(line)
        parts = [self._link(each) for each in lines]
        if self.signer is not None and self.seq and (self.since >= self.every or checkpoint):
            seq, digest = self.head
            assert digest is not None
            parts.append(self._link(self._encode(self._checkpoint(seq, digest))))
            self._mark = self.seq
        self._due = self._next_due()
        return b"".join(parts)

    def _link(self, line: bytes) -> bytes:
        """``line`` with its chain fields as its object's last members (``{}`` takes them with no comma)."""
        self.seq += 1
        data = b"".join((line[:-2], self._tag if len(line) > 3 else self._tag[1:], b"%d" % self.seq, self._tail))
        self._tail = _tail(hashlib.sha256(data).hexdigest())
        return data

    def _checkpoint(self, seq: int, digest: str) -> dict[str, Any]:
        assert self.signer is not None
        return {**audit_head(CHECKPOINT_EVENT, now_rfc3339(), None), "head": {"seq": seq, "sha256": digest},
                "key": self.signer.key_id, "every": self.every,
                "signature": self.signer.sign(checkpoint_message(self.chain, seq, digest))}


_TAIL = b',"prev":"%s"}\n'


def _tail(digest: str) -> bytes:
    return _TAIL % digest.encode()
