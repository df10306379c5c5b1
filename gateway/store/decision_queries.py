"""Reads of the console's events (decisions.py) for the admin API: pages, a chart, an export, a run's timeline,
rule hits and reloads. Every read is one indexed query on the reader's connection, on a thread of its own.

Pages are keyset-paged, newest first: the cursor is the last row's ``(ts, id)``, so a page of 100,000 rows
costs what the first page costs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.core.clock import rfc3339
from gateway.core.errors import StoreUnavailable
from gateway.store.db import DB_ERRORS
from gateway.store.decisions import DecisionLog

__all__ = ["CALL_EVENTS", "COUNT_BOUND", "DecisionFilter", "DecisionQueries", "decode_cursor"]

T = TypeVar("T")
CALL_EVENTS = ("call.outcome", "resource.outcome", "prompt.outcome")
COUNT_BOUND = 10_000  # a page's ``total`` is exact up to this; above it, COUNT_BOUND + 1 means "more"
_COLUMNS = {"tool": "tool", "principal": "principal", "verdict": "verdict", "rule": "rule", "run": "run",
            "upstream": "upstream"}


@dataclass(frozen=True, slots=True)
class DecisionFilter:
    """What a search narrows to; empty strings and None match everything."""

    since: float | None = None
    until: float | None = None
    tool: str = ""
    principal: str = ""
    verdict: str = ""
    rule: str = ""
    run: str = ""
    upstream: str = ""
    principal_key: str = ""
    events: tuple[str, ...] = CALL_EVENTS

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition and its parameters."""
        clauses = [f"event IN ({', '.join('?' for _ in self.events)})"]
        params: list[Any] = list(self.events)
        if self.since is not None:
            clauses.append("ts >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("ts < ?")
            params.append(self.until)
        for name, column in _COLUMNS.items():
            value = getattr(self, name)
            if value:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.principal_key:
            clauses.append("principal_key = ?")
            params.append(self.principal_key)
        return " AND ".join(clauses), params


def decode_cursor(cursor: str) -> tuple[float, str] | None:
    """``ts:id`` back to its parts; None when it is not a cursor this API wrote."""
    ts, sep, row_id = cursor.partition(":")
    try:
        return (float(ts), row_id) if sep and row_id else None
    except ValueError:
        return None


def _event(body: str, replica: str) -> dict[str, Any]:
    """A row's audit line back as the event, with the replica that wrote it."""
    event: dict[str, Any] = json.loads(body)
    event["replica"] = replica
    return event


class DecisionQueries:
    """The admin API's reads of one ``DecisionLog``."""

    def __init__(self, decisions: DecisionLog) -> None:
        self.decisions = decisions
        self._db = decisions.reader
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-console-reads")

    async def _run(self, work: Any, *args: Any) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work, *args)
        except DB_ERRORS as exc:
            raise StoreUnavailable(f"the console's events cannot be read: {exc}") from None

    async def page(self, where: DecisionFilter, limit: int, cursor: tuple[float, str] | None
                   ) -> tuple[list[dict[str, Any]], str | None, int]:
        """Up to ``limit`` events, newest first, after ``cursor``; the next cursor and how many match in all (at most
        ``COUNT_BOUND + 1``, which means more than ``COUNT_BOUND``)."""
        await asyncio.get_running_loop().run_in_executor(None, self.decisions.flushed)
        result: tuple[list[dict[str, Any]], str | None, int] = await self._run(self._page, where, limit, cursor)
        return result

    def _page(self, where: DecisionFilter, limit: int, cursor: tuple[float, str] | None
              ) -> tuple[list[dict[str, Any]], str | None, int]:
        condition, params = where.where()
        # Counted up to a bound: past it the page says "more than" (counting 100,000 rows costs more than the page).
        total = int(self._db.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM console_events WHERE {condition}"
                                     " LIMIT ?) AS counted", [*params, COUNT_BOUND + 1]).fetchone()[0])
        if cursor is not None:
            condition += " AND (ts, id) < (?, ?)"  # a row value: the (ts, id) index walks straight to it
            params = [*params, cursor[0], cursor[1]]
        rows = self._db.execute(f"SELECT ts, id, body, replica FROM console_events WHERE {condition}"
                                " ORDER BY ts DESC, id DESC LIMIT ?", [*params, limit + 1]).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        following = f"{rows[-1][0]!r}:{rows[-1][1]}" if more and rows else None
        return [_event(r[2], r[3]) for r in rows], following, total

    async def chart(self, where: DecisionFilter) -> list[dict[str, Any]]:
        """Calls per minute by verdict, oldest minute first."""
        result: list[dict[str, Any]] = await self._run(self._chart, where)
        return result

    def _chart(self, where: DecisionFilter) -> list[dict[str, Any]]:
        condition, params = where.where()
        rows = self._db.execute(f"SELECT minute, verdict, COUNT(*) FROM console_events WHERE {condition}"
                                " GROUP BY minute, verdict ORDER BY minute", params).fetchall()
        minutes: dict[int, dict[str, int]] = {}
        for minute, verdict, count in rows:
            minutes.setdefault(int(minute), {})[str(verdict)] = int(count)
        return [{"minute": rfc3339(m * 60), "counts": counts} for m, counts in minutes.items()]

    def export(self, where: DecisionFilter, limit: int) -> Iterator[bytes]:
        """The events as JSON lines, newest first, read in pages (call from a thread: it blocks)."""
        self.decisions.flushed()
        cursor: tuple[float, str] | None = None
        sent = 0
        while sent < limit:
            rows, following, _ = self._pool.submit(self._page, where, min(1000, limit - sent), cursor).result()
            for row in rows:
                yield json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n"
            sent += len(rows)
            if following is None:
                return
            cursor = decode_cursor(following)

    async def timeline(self, principal_key: str, run: str, limit: int) -> list[dict[str, Any]]:
        """A run's events, oldest first."""
        await asyncio.get_running_loop().run_in_executor(None, self.decisions.flushed)
        result: list[dict[str, Any]] = await self._run(self._timeline, principal_key, run, limit)
        return result

    def _timeline(self, principal_key: str, run: str, limit: int) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT body, replica FROM console_events WHERE principal_key = ? AND run = ?"
                                " ORDER BY ts, id LIMIT ?", (principal_key, run, limit)).fetchall()
        return [_event(r[0], r[1]) for r in rows]

    async def rule_hits(self, now: float) -> dict[str, tuple[int, int]]:
        """Each rule that fired: (in the last hour, in the last day)."""
        result: dict[str, tuple[int, int]] = await self._run(self._rule_hits, now)
        return result

    def _rule_hits(self, now: float) -> dict[str, tuple[int, int]]:
        hour, day = int((now - 3600) // 60), int((now - 86400) // 60)
        rows = self._db.execute("SELECT rule, SUM(CASE WHEN minute >= ? THEN hits ELSE 0 END), SUM(hits)"
                                " FROM console_hits WHERE minute >= ? GROUP BY rule", (hour, day)).fetchall()
        return {str(rule): (int(hour), int(day)) for rule, hour, day in rows}

    async def recent(self, event: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` events of one kind (policy reloads, tool drifts), newest first."""
        result: list[dict[str, Any]] = await self._run(self._recent, event, limit)
        return result

    def _recent(self, event: str, limit: int) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT body, replica FROM console_events WHERE event = ?"
                                " ORDER BY ts DESC, id DESC LIMIT ?", (event, limit)).fetchall()
        return [_event(r[0], r[1]) for r in rows]

    def close(self) -> None:
        """Stop the reader's thread."""
        self._pool.shutdown(wait=True)
