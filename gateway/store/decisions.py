"""The console's copy of the decision log, in the shared store: every replica's calls in one table.

The JSON-lines file stays the record of truth. Each event the audit log writes that the console shows
(a call's, a resource read's or a prompt get's outcome, a policy reload, a tool drift) is also queued
here, already redacted as the file has it, and written behind in batches on a thread of its own, so a
call never waits for this table: when the queue is full the oldest rows are dropped and counted. Rows
older than the retention (``console.retention``) are deleted in the background.

    console_events   one row per event: when, which replica, who, which run, tool, verdict, deciding rule,
                     and the event's line as the audit log wrote it (its size bounded there)
    console_hits     how often each rule fired, per minute, for the rules' hit counts
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.core.clock import parse_rfc3339
from gateway.policy.call import Principal
from gateway.store.db import DB_ERRORS, Db
from gateway.store.migrations import Migration, migrate, statements

__all__ = ["CONSOLE_EVENTS", "DECISION_MIGRATIONS", "DecisionLog", "row_of"]

log = logging.getLogger("gateway.console")

# The audit events the console keeps.
CONSOLE_EVENTS = frozenset({"call.outcome", "resource.outcome", "prompt.outcome", "policy.reload", "tool.drift"})
_MAX_QUEUED = 20_000  # rows waiting to be written; past it the oldest are dropped (the file has them all)
_BATCH = 500
_FLUSH_SECONDS = 0.2  # a row is in the table this long after its call at most, on a quiet database
_PRUNE_SECONDS = 60.0

DECISION_MIGRATIONS = [
    Migration(1, "the console's events and rule hits", statements(
        "CREATE TABLE IF NOT EXISTS console_events (id TEXT PRIMARY KEY, ts DOUBLE PRECISION NOT NULL,"
        " minute BIGINT NOT NULL, replica TEXT NOT NULL, event TEXT NOT NULL, principal TEXT NOT NULL,"
        " principal_key TEXT NOT NULL, run TEXT NOT NULL, tool TEXT NOT NULL, upstream TEXT NOT NULL,"
        " verdict TEXT NOT NULL, rule TEXT NOT NULL, body TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS console_events_ts ON console_events (ts, id)",
        "CREATE INDEX IF NOT EXISTS console_events_run ON console_events (principal_key, run, ts)",
        "CREATE INDEX IF NOT EXISTS console_events_tool ON console_events (tool, ts)",
        "CREATE INDEX IF NOT EXISTS console_events_verdict ON console_events (verdict, ts)",
        "CREATE TABLE IF NOT EXISTS console_hits (minute BIGINT NOT NULL, rule TEXT NOT NULL,"
        " hits BIGINT NOT NULL, PRIMARY KEY (minute, rule))",
    )),
]

Row = tuple[Any, ...]
Hit = tuple[int, str]  # (minute, rule)


def row_of(event: Mapping[str, Any], line: bytes, replica: str, at: float) -> tuple[Row, list[Hit]] | None:
    """The event's row (its ``line`` as the audit log wrote it is the body) and its rule hits; None for an event the
    console does not keep. Its time is the event's own (``at``, when it was handed over, if that cannot be read)."""
    kind = event.get("event")
    if kind not in CONSOLE_EVENTS:
        return None
    try:
        at = parse_rfc3339(str(event.get("time")))
    except ValueError:
        pass
    record = event.get("principal")
    principal = Principal.from_record(record) if isinstance(record, Mapping) and "id" in record else None
    key = principal.key if principal is not None else ""
    decided = event.get("decided_by")
    rule = decided[0] if isinstance(decided, list) and decided else ""
    event_id = _text(event.get("id"))
    verdict = event.get("verdict") or ("applied" if event.get("applied") else "refused" if kind == "policy.reload"
                                       else "")
    body = line.decode("utf-8", "replace").rstrip("\n")  # the audit log's encoding: valid UTF-8, bounded
    row = (event_id, at, int(at // 60), replica, kind, _text(principal.id if principal else ""),
           _text(key), _text(event.get("session")),
           _text(event.get("tool") or event.get("name")), _text(event.get("upstream")), _text(verdict), _text(rule),
           body)
    rules = event.get("rules")
    hits = [(int(at // 60), _text(r["rule"])) for r in rules if isinstance(r, Mapping) and r.get("outcome") == "fired"
            and r.get("rule")] if isinstance(rules, list) else []
    return row, hits


def _text(value: Any) -> str:
    """``value`` as text a database takes: what UTF-8 cannot hold (a lone surrogate an agent sent) becomes ``?``
    (the audit file keeps the exact value)."""
    text = "" if value is None else str(value)
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


class DecisionLog:
    """Queues the console's events and writes them behind; reads them for the admin API."""

    def __init__(self, connect: Callable[[], Db], where: str, replica: str, retention: float) -> None:
        self.replica = replica
        self.retention = retention
        self.dropped = 0  # rows dropped because the queue was full (or the database refused them)
        self._connect = connect
        self._writer = connect()
        migrate(self._writer, "console", DECISION_MIGRATIONS, where)
        self.reader = connect()  # the queries' connection (decision_queries.py), used on one thread
        self._queue: deque[tuple[Mapping[str, Any], bytes, float]] = deque()
        self._cond = threading.Condition()
        self._queued = 0  # events ever queued
        self._finished = 0  # of those, written (or dropped): flushed() waits for the ones queued before it
        self._closed = False
        self._pruned = time.time()  # the first pruning a minute after start, then every minute
        self._thread = threading.Thread(target=self._run, name="gateway-console-writer", daemon=True)
        self._thread.start()

    def record(self, event: Mapping[str, Any], line: bytes) -> None:
        """Queue ``event`` (and ``line``, as the audit log wrote it) if the console keeps it; never raises. Its row is
        made on the writer's thread: the call pays for one append."""
        if event.get("event") not in CONSOLE_EVENTS:
            return
        with self._cond:
            if len(self._queue) >= _MAX_QUEUED:
                self._queue.popleft()
                self._finished += 1
                if not self.dropped:
                    log.warning("the console's table falls behind: its oldest queued rows are dropped (the audit log"
                                " has them)")
                self.dropped += 1
            self._queue.append((event, line, time.time()))
            self._queued += 1
            self._cond.notify()

    def flushed(self, timeout: float = 10.0) -> bool:
        """Wait until the rows queued before this call are written (what the admin API reads then sees this
        replica's calls); rows queued meanwhile are not waited for, so a busy replica answers at once."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._queued
            while self._finished < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._closed:
                    self._cond.wait(_PRUNE_SECONDS)  # woken by a row, or to prune now and then
                if self._closed and not self._queue:
                    return
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            try:
                if batch:
                    self._write(batch)
                self._maybe_prune()
            finally:
                with self._cond:
                    self._finished += len(batch)
                    self._cond.notify_all()
            if batch and len(batch) < _BATCH:
                time.sleep(_FLUSH_SECONDS)  # gather the next batch: one transaction per batch, not per call

    def _rows(self, batch: Sequence[tuple[Mapping[str, Any], bytes, float]]) -> list[tuple[Row, list[Hit]]]:
        found = []
        for event, line, at in batch:
            try:
                row = row_of(event, line, self.replica, at)
            except Exception:  # a malformed event is the file's business; the console goes without it
                log.exception("an audit event could not be kept for the console")
                continue
            if row is not None:
                found.append(row)
        return found

    def _write(self, events: Sequence[tuple[Mapping[str, Any], bytes, float]]) -> None:
        try:
            self._insert(self._rows(events))
        except Exception:  # never the end of the writer: the rows are lost to the console, not to the file
            self.dropped += len(events)
            log.exception("%d console rows could not be written (the audit log has them)", len(events))

    def _insert(self, batch: Sequence[tuple[Row, list[Hit]]]) -> None:
        db = self._writer
        try:
            db.begin()
            db.executemany("INSERT INTO console_events (id, ts, minute, replica, event, principal, principal_key,"
                           " run, tool, upstream, verdict, rule, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                           " ON CONFLICT (id) DO NOTHING", [row for row, _ in batch])
            hits = Counter(hit for _, found in batch for hit in found)
            if hits:
                db.executemany("INSERT INTO console_hits (minute, rule, hits) VALUES (?, ?, ?)"
                               " ON CONFLICT (minute, rule) DO UPDATE SET hits = console_hits.hits + excluded.hits",
                               [(minute, rule, count) for (minute, rule), count in hits.items()])
            db.commit()
        except DB_ERRORS as exc:
            db.rollback()
            self.dropped += len(batch)
            log.warning("%d console rows could not be written (the audit log has them): %s", len(batch), exc)

    def _maybe_prune(self) -> None:
        now = time.time()
        if now - self._pruned < _PRUNE_SECONDS:
            return
        self._pruned = now
        self.prune(now)

    def prune(self, now: float | None = None) -> int:
        """Delete rows past the retention; how many events were deleted (on the writer's connection)."""
        cutoff = (time.time() if now is None else now) - self.retention
        db = self._writer
        try:
            db.begin()
            deleted = db.execute("DELETE FROM console_events WHERE ts < ?", (cutoff,)).rowcount
            db.execute("DELETE FROM console_hits WHERE minute < ?", (int(cutoff // 60),))
            db.commit()
        except DB_ERRORS as exc:
            db.rollback()
            log.warning("old console rows could not be deleted: %s", exc)
            return 0
        return int(deleted)

    def close(self) -> None:
        """Write what is queued, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)
        self._writer.close()
        self.reader.close()
