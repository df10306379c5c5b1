"""Where a decision log's chain breaks, and what was done to it: a line changed, removed, inserted or reordered.

A chain's lines in one file are a ``Segment``, read in order. A line that does not follow the one before
(``seq`` one more, ``prev`` that line's SHA-256) is a suspect, judged with the line after it (``judge``),
so the report names the line that was tampered with rather than the first one that noticed:

- line k changed: line k+1's ``prev`` is not line k's hash, and k+2 follows k+1: *changed*, at line k;
- line k removed: line k+1 where k was due: *removed* (seq k), at the line after the gap;
- a line inserted, whatever its ``seq`` and ``prev``: two lines claim one place, and the chain goes on from
  only one: *inserted*, at the other;
- a line from elsewhere in the chain (an older file): a ``seq`` that belongs earlier: *inserted*, there;
- lines k and k+1 swapped: k+1 where k was due, then k, then k+1's successor: *reordered*, at the first.

A line moved further than its neighbour shows as removed where it was and inserted (or reordered) where
it went. The last line of a chain has no line after it to vouch for it: changing it shows only against
a checkpoint, a later file, or a copy of the head kept elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHANGED", "INSERTED", "REMOVED", "REORDERED", "Entry", "Problem", "Segment", "Where", "follows", "judge"]

CHANGED, REMOVED, INSERTED, REORDERED = "changed", "removed", "inserted", "reordered"


@dataclass(frozen=True, slots=True)
class Where:
    """A line of a file: ``rank`` is the file's place among those read (the chain's order when it can be told)."""

    rank: int
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One chained line: its ``seq``, the ``prev`` it names, its own SHA-256, and where it is."""

    seq: int
    prev: str | None
    digest: str
    where: Where


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong at a line: its kind (``changed``, ``removed``, …) and what the log shows there."""

    where: Where
    kind: str
    message: str
    chain: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judged break: the problem, the line the chain goes on from, and whether the line after was used up."""

    problem: Problem
    head: Entry
    took_next: bool = False


def follows(before: Entry, after: Entry | None) -> bool:
    """Whether ``after`` is the next line of the chain after ``before``."""
    return after is not None and after.seq == before.seq + 1 and after.prev == before.digest


def judge(chain: str, head: Entry, suspect: Entry, after: Entry | None) -> Verdict:
    """What the line ``suspect``, which does not follow ``head``, says was done; ``after`` is the line after it."""
    due = head.seq + 1
    goes_on = after is not None and after.seq == due and after.prev == head.digest  # after follows head

    def problem(at: Entry, kind: str, message: str) -> Problem:
        return Problem(at.where, kind, message, chain)

    if suspect.seq == due:  # in its place, but naming another line before it
        if goes_on and after is not None:
            return Verdict(problem(suspect, INSERTED, f"seq {due} here does not name line {head.where.line} before"
                                   f" it, and line {after.where.line} does: this line is not part of the chain"), head)
        return Verdict(problem(head, CHANGED, f"not the line {suspect.where} names as the one before it: this line"
                               " was changed (or the prev of the next one)"), suspect)
    if suspect.seq == head.seq and suspect.prev == head.prev:  # two lines in one place
        if follows(suspect, after) and suspect.digest != head.digest:  # (a copy of a line: the copy is the extra)
            return Verdict(problem(head, INSERTED, f"it claims seq {head.seq}, as line {suspect.where.line} does, and"
                                   " the chain goes on from that one: this line was inserted"), suspect)
        return Verdict(problem(suspect, INSERTED, f"it claims seq {head.seq}, as line {head.where.line} does, and"
                               " the chain goes on from that one: this line was inserted"), head)
    if suspect.seq < due:
        return Verdict(problem(suspect, INSERTED, f"seq {suspect.seq} belongs earlier in the chain (seq {due} was due"
                               " here): a line copied here from elsewhere, or moved"), head)
    if goes_on:  # ahead of its place, and the chain goes on from head with the line after it
        assert after is not None
        if after.seq + 1 == suspect.seq and suspect.prev == after.digest:
            return Verdict(problem(suspect, REORDERED, f"lines {suspect.where.line} and {after.where.line} are in the"
                                   f" wrong order (seq {suspect.seq} before seq {after.seq})"), suspect, took_next=True)
        return Verdict(problem(suspect, REORDERED, f"seq {suspect.seq} is out of its place: the chain goes on with seq"
                               f" {due} at line {after.where.line} (this line was moved here, or inserted)"), head)
    missing = f"seq {due}" if suspect.seq == due + 1 else f"seq {due} to {suspect.seq - 1}"
    return Verdict(problem(suspect, REMOVED, f"{missing} missing before this line (after seq {head.seq} at line"
                           f" {head.where.line})"), suspect)


class Segment:
    """One chain's lines in one file, checked in order: ``add`` each, then ``finish``."""

    def __init__(self, chain: str) -> None:
        self.chain = chain
        self.first: Entry | None = None
        self.head: Entry | None = None  # the last line the chain goes on from
        self.problems: list[Problem] = []
        self._suspect: Entry | None = None

    def add(self, entry: Entry) -> None:
        """The next line of this chain in the file."""
        suspect, self._suspect = self._suspect, None
        if suspect is None:
            self._step(entry)
            return
        assert self.head is not None
        verdict = judge(self.chain, self.head, suspect, entry)
        self.problems.append(verdict.problem)
        self.head = verdict.head
        if not verdict.took_next:
            self._step(entry)

    def finish(self) -> None:
        """The file has ended: a suspect left is judged with nothing after it."""
        suspect, self._suspect = self._suspect, None
        if suspect is not None:
            assert self.head is not None
            verdict = judge(self.chain, self.head, suspect, None)
            self.problems.append(verdict.problem)
            self.head = verdict.head

    def _step(self, entry: Entry) -> None:
        if self.head is None:
            self.first = self.head = entry  # how it joins the files before is checked when the chain is put together
        elif follows(self.head, entry):
            self.head = entry
        else:
            self._suspect = entry
