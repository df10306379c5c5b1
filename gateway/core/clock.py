"""Wall-clock time: the one ``now()``, RFC 3339 text from a UNIX time, and RFC 3339 text back to one.

Each visible format keeps the shape users and clients already read, so there is one function per
format rather than one format (all UTC):

    rfc3339(ts)          2026-12-01T23:31:08Z          approvals: expires_at, valid_until
    rfc3339_ms(ts)       2026-12-01T23:31:08.123Z      audit events, sessions, reloads, JSON logs
    rfc3339_us(ts)       2026-12-01T23:31:08.123456Z   MCP tasks (no fraction on a whole second)
    rfc3339_offset(ts)   2026-12-01T23:31:08+00:00     upstream status ("since")

The time is taken to the microsecond, then cut (not rounded) to the format's precision. A component that takes
a clock for its tests keeps taking one; ``now`` is the default it is given.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["now", "now_rfc3339", "parse_rfc3339", "rfc3339", "rfc3339_ms", "rfc3339_offset", "rfc3339_us"]


def now() -> float:
    """The wall-clock time as a UNIX time (seconds); monotonic time is for measuring, not for stamps."""
    return time.time()


def rfc3339(ts: float) -> str:
    """A UNIX time as RFC 3339 in UTC, whole seconds, ``Z``."""
    return _utc(ts).isoformat(timespec="seconds").replace("+00:00", "Z")


def rfc3339_ms(ts: float) -> str:
    """A UNIX time as RFC 3339 in UTC with milliseconds, ``Z``, as CEL's ``timestamp()`` reads it."""
    return _utc(ts).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rfc3339_us(ts: float) -> str:
    """A UNIX time as RFC 3339 in UTC with microseconds (none on a whole second), ``Z``."""
    return _utc(ts).isoformat().replace("+00:00", "Z")


def rfc3339_offset(ts: float) -> str:
    """A UNIX time as RFC 3339 in UTC, whole seconds, with the offset written ``+00:00``."""
    return _utc(ts).isoformat(timespec="seconds")


def now_rfc3339() -> str:
    """The current time as ``rfc3339_ms`` writes it (what audit events and stored rows carry)."""
    return rfc3339_ms(now())


def parse_rfc3339(text: str) -> float:
    """An RFC 3339 time (``Z`` or an offset) as a UNIX time; raises ``ValueError`` when it is not one."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)
