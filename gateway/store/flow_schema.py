"""Sessions schema version 2, the same in SQLite and PostgreSQL: what a run carries between calls (issue 21).

- ``sessions`` gains ``labels`` (a JSON list), ``history`` (a JSON list of entries, the newest 64) and
  ``tallies`` (``Tallies.to_json()``); rows from before read as empty.
- ``tally_sums``: per principal, minute bucket and sum tally, the amount the calls admitted in that minute
  added (the usage windows' sums are the buckets inside them).
- ``tally_seen``: per principal, distinct tally and value, the last minute a call admitted it (a window's
  distinct count is the values last used inside it).
- ``tally_locks``: one row per principal, locked by each admission first (gateway/store/admission.py), so
  two admissions of one principal, in any process, never interleave.

The types are spelled so both databases read them: SQLite gives ``BIGINT`` integer and ``DOUBLE PRECISION``
real affinity.
"""

from __future__ import annotations

from gateway.store.migrations import Migration, statements

__all__ = ["FLOW_MIGRATION"]

FLOW_MIGRATION = Migration(2, "labels, tallies and history of runs; window tallies", statements(
    "ALTER TABLE sessions ADD COLUMN labels TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE sessions ADD COLUMN history TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE sessions ADD COLUMN tallies TEXT NOT NULL DEFAULT '{}'",
    """CREATE TABLE IF NOT EXISTS tally_sums (
    principal TEXT NOT NULL,
    bucket BIGINT NOT NULL,
    tally TEXT NOT NULL,
    amount DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, bucket, tally)
)""",
    """CREATE TABLE IF NOT EXISTS tally_seen (
    principal TEXT NOT NULL,
    tally TEXT NOT NULL,
    value TEXT NOT NULL,
    bucket BIGINT NOT NULL,
    PRIMARY KEY (principal, tally, value)
)""",
    "CREATE TABLE IF NOT EXISTS tally_locks (principal TEXT PRIMARY KEY)",
))
