"""Check decision log files against their hash chains: ``gateway audit verify FILE... [--key PUB]``.

The files are read as a stream, a line at a time (at most ``AUDIT_VERIFY_MAX_LINE_BYTES`` of one), so
memory stays flat however long they are: what is kept is a few lines per chain and file. Every chain in
the files is checked on its own (a gateway's workers each write theirs), in any order the files are given:

1. each file's lines of a chain are checked line by line (``audit_breaks.Segment``);
2. a chain's pieces from the files are put in order by ``seq``, and each must start where the one before
   ended (its first ``prev`` naming the last line of the file before): so a file's cut-off end, or a
   file missing between two others, shows;
3. the chain must begin at seq 1 with ``prev`` null, unless ``partial`` (older files rotated away);
4. with a public key, every checkpoint's signature must verify and name the head just before it, and
   each chain must hold at least one (else nothing of it is vouched for by the key).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.core.limits import AUDIT_VERIFY_MAX_LINE_BYTES, AUDIT_VERIFY_PROBLEMS_PER_CHAIN
from gateway.pipeline.audit_breaks import CHANGED, INSERTED, REMOVED, Entry, Problem, Segment, Where, follows
from gateway.pipeline.audit_chain import CHECKPOINT_PREFIX, Link, checkpoint_message, line_digest, parse_link
from gateway.pipeline.audit_keys import CheckpointVerifier

__all__ = ["CHECKPOINT", "NOT_CHAINED", "TRUNCATED", "UNSIGNED", "ChainSummary", "VerifyReport", "verify"]

TRUNCATED, NOT_CHAINED, CHECKPOINT, UNSIGNED = "truncated", "not-chained", "checkpoint", "unsigned"
_FIRST_LINES = 1_000  # lines read from the start of a file to find its first event, to put the files in order


@dataclass
class ChainSummary:
    """One chain as the files hold it."""

    chain: str
    events: int = 0
    first_seq: int = 0
    last_seq: int = 0
    files: list[str] = field(default_factory=list)
    checkpoints: int = 0
    signed: int = 0  # checkpoints whose signature verified
    signed_through: int = 0  # the seq of the last verified checkpoint: events up to it are vouched for by the key
    problems: list[Problem] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list, repr=False)
    last: Entry | None = field(default=None, repr=False)

    @property
    def intact(self) -> bool:
        """Whether nothing is wrong with this chain."""
        return not self.problems


@dataclass
class VerifyReport:
    """What the check found: events read, each chain, and every problem in the files' order."""

    events: int
    chains: list[ChainSummary]
    problems: list[Problem]
    shown: list[Problem]  # the problems listed (at most AUDIT_VERIFY_PROBLEMS_PER_CHAIN a chain or file)
    keyed: bool

    @property
    def ok(self) -> bool:
        """Whether every chain is intact (and, with a key, signed)."""
        return not self.problems


def verify(paths: Sequence[Path], verifier: CheckpointVerifier | None = None, *, partial: bool = False) -> VerifyReport:
    """Check the files' chains (OSError when a file cannot be read)."""
    run = _Run(verifier)
    for rank, path in enumerate(_ordered(paths)):
        run.read(rank, path)
    return run.report(partial)


class _Run:
    def __init__(self, verifier: CheckpointVerifier | None) -> None:
        self.verifier = verifier
        self.chains: dict[str, ChainSummary] = {}
        self.loose: list[Problem] = []  # at lines that belong to no chain
        self.events = 0

    def read(self, rank: int, path: Path) -> None:
        segments: dict[str, Segment] = {}
        for number, raw, whole in _lines(path):
            where = Where(rank, str(path), number)
            link = parse_link(raw) if whole and raw.endswith(b"\n") else None
            if link is None:
                self.loose.append(_not_an_event(raw, whole, where))
                continue
            self.events += 1
            entry = Entry(link.seq, link.prev, line_digest(raw), where)
            summary = self.chains.setdefault(link.chain, ChainSummary(link.chain))
            segment = segments.get(link.chain)
            if segment is None:
                segment = segments[link.chain] = Segment(link.chain)
                summary.files.append(str(path))
            segment.add(entry)
            summary.events += 1
            if summary.last is None or entry.seq >= summary.last.seq:
                summary.last = entry
            if raw.startswith(CHECKPOINT_PREFIX):
                self._checkpoint(summary, raw, link, where)
        for chain, segment in segments.items():
            segment.finish()
            self.chains[chain].segments.append(segment)

    def _checkpoint(self, summary: ChainSummary, raw: bytes, link: Link, where: Where) -> None:
        summary.checkpoints += 1
        problem = _checkpoint_problem(raw, link, self.verifier)
        if problem is not None:
            summary.problems.append(Problem(where, CHECKPOINT, problem, link.chain))
        elif self.verifier is not None:
            summary.signed += 1
            summary.signed_through = max(summary.signed_through, link.seq)

    def report(self, partial: bool) -> VerifyReport:
        shown: list[Problem] = []
        for summary in self.chains.values():
            _join(summary, partial)
            if self.verifier is not None and summary.signed == 0 and summary.last is not None:
                summary.problems.append(Problem(summary.last.where, UNSIGNED, "no checkpoint of this chain is signed"
                                                " by the key given: none of its events is vouched for",
                                                summary.chain))
            summary.problems.sort(key=_order)
            shown.extend(summary.problems[:AUDIT_VERIFY_PROBLEMS_PER_CHAIN])
        by_file: dict[str, int] = {}
        for problem in self.loose:
            by_file[problem.where.file] = by_file.get(problem.where.file, 0) + 1
            if by_file[problem.where.file] <= AUDIT_VERIFY_PROBLEMS_PER_CHAIN:
                shown.append(problem)
        problems = sorted([*self.loose, *(p for s in self.chains.values() for p in s.problems)], key=_order)
        return VerifyReport(self.events, list(self.chains.values()), problems, sorted(shown, key=_order),
                            self.verifier is not None)


def _join(summary: ChainSummary, partial: bool) -> None:
    """Put a chain's pieces from the files in order, and check each starts where the one before ended."""
    pieces = sorted((s for s in summary.segments if s.first is not None), key=lambda s: (_first(s).seq,
                                                                                         _first(s).where.rank))
    summary.problems.extend(p for s in pieces for p in s.problems)
    if not pieces:
        return
    first = _first(pieces[0])
    summary.first_seq = first.seq
    summary.last_seq = summary.last.seq if summary.last is not None else first.seq
    if not partial and (first.seq != 1 or first.prev is not None):
        begins = f"seq {first.seq}" if first.seq != 1 else "seq 1 naming a line before it"
        summary.problems.append(Problem(first.where, REMOVED if first.seq != 1 else CHANGED, f"the chain begins at"
                                        f" {begins}: its start is not in the files given (give the files rotated"
                                        " before, or --partial to check from here)", summary.chain))
    for before, after in itertools.pairwise(pieces):
        problem = _seam(_head(before), _first(after))
        if problem is not None:
            summary.problems.append(Problem(problem[0], problem[1], problem[2], summary.chain))


def _seam(end: Entry, start: Entry) -> tuple[Where, str, str] | None:
    """What is wrong where one file's piece of a chain ends and the next file's begins (None: nothing)."""
    if follows(end, start):
        return None
    if start.seq == end.seq + 1:
        return (end.where, CHANGED, f"not the line {start.where} names as the one before it: the last line of"
                f" {end.where.file} was changed (or the first of {start.where.file})")
    if start.seq > end.seq + 1:
        missing = f"seq {end.seq + 1}" if start.seq == end.seq + 2 else f"seq {end.seq + 1} to {start.seq - 1}"
        return (start.where, REMOVED, f"{missing} missing between {end.where} and this line: the end of"
                f" {end.where.file} was cut off, its lines removed, or a file between the two is not given")
    return (start.where, INSERTED, f"seq {start.seq} is already in {end.where.file} (it reaches seq {end.seq}):"
            " this file repeats part of the chain (a copy, or lines spliced in)")


def _checkpoint_problem(raw: bytes, link: Link, verifier: CheckpointVerifier | None) -> str | None:
    """What is wrong with a checkpoint line (None: nothing, or nothing that can be checked without a key)."""
    try:
        event = json.loads(raw)
        head = event.get("head") or {}
        seq, digest = head.get("seq"), head.get("sha256")
    except (ValueError, AttributeError):
        return "a checkpoint that is not a JSON object with its head: changed"
    if seq != link.seq - 1 or digest != link.prev or not isinstance(digest, str):
        return "it names a head that is not the line before it: changed"
    if verifier is None:
        return None
    if event.get("key") != verifier.key_id:
        return f"signed by key {event.get('key')!r}, not by the key given ({verifier.key_id})"
    if not verifier.verify(checkpoint_message(link.chain, seq, digest), event.get("signature")):
        return "its signature does not verify: the checkpoint was forged or changed"
    return None


def _not_an_event(raw: bytes, whole: bool, where: Where) -> Problem:
    if not whole:
        return Problem(where, NOT_CHAINED, f"a line longer than {AUDIT_VERIFY_MAX_LINE_BYTES} bytes: not an event"
                       " the gateway wrote")
    if not raw.endswith(b"\n"):
        return Problem(where, TRUNCATED, "the file ends inside this line: it was cut off")
    try:
        parsed = json.loads(raw)
    except ValueError:
        return Problem(where, NOT_CHAINED, "not a JSON event: changed, or not written by the gateway")
    if not isinstance(parsed, dict):
        return Problem(where, NOT_CHAINED, "not a JSON object: changed, or not written by the gateway")
    return Problem(where, NOT_CHAINED, "an event without its chain fields at its end: inserted, or changed")


def _first(segment: Segment) -> Entry:
    assert segment.first is not None
    return segment.first


def _head(segment: Segment) -> Entry:
    assert segment.head is not None
    return segment.head


def _order(problem: Problem) -> tuple[int, int]:
    return problem.where.rank, problem.where.line


def _lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(number, bytes, whole) of each line; one longer than the cap comes as its first bytes, whole False."""
    with open(path, "rb") as file:
        number = 0
        while raw := file.readline(AUDIT_VERIFY_MAX_LINE_BYTES + 1):
            number += 1
            if len(raw) > AUDIT_VERIFY_MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := file.readline(AUDIT_VERIFY_MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # the rest of that line, read and dropped
                yield number, raw[:200], False
                continue
            yield number, raw, True


def _ordered(paths: Sequence[Path]) -> list[Path]:
    """The files once each, in their chain's order: by the chain and seq of each one's first event."""
    unique: dict[str, Path] = {}
    for path in paths:
        unique.setdefault(os.path.realpath(path), path)

    def position(item: tuple[int, Path]) -> tuple[str, int, int]:
        index, path = item
        for number, raw, whole in _lines(path):
            link = parse_link(raw) if whole else None
            if link is not None:
                return link.chain, link.seq, index
            if number >= _FIRST_LINES:
                break
        return "~", 0, index  # no event near its start: after the others

    return [path for _, path in sorted(enumerate(unique.values()), key=position)]
