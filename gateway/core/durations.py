"""Durations: one grammar for the config file, policy files, ``?wait=`` and CEL's ``duration()``.

The grammar is Go's ``time.ParseDuration``, which CEL's spec names for ``duration()``: an optional
sign, then one or more decimal numbers each with a unit, in any order (``1h30m``, ``1.5h``, ``90s``,
``300ms``, ``-2m``), or a lone ``0``. The units are ``h``, ``m``, ``s``, ``ms``, ``us`` and ``ns``.

``duration()`` in CEL reads exactly that (``cel_nanoseconds``). Everywhere else a person writes a
duration (``seconds``, ``parse_duration``), three conveniences are added on top: space around the text is
ignored, a plain number is seconds (``90``, ``"90"``, ``"1.5"``), and whole days may lead (``7d``, ``1d12h``).
CEL keeps the bare grammar because its spec refuses ``duration("90")`` and ``duration(" 1s")``, and the C++
engine does too.

Two ways back to text: ``duration_text`` (``1h30m``, the way the config and policies write it) and
``duration_unit_text`` (in the one largest unit that divides it: ``90m``), for messages already worded
so. Each reads back through ``parse_duration`` to the same whole seconds.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["cel_nanoseconds", "duration_text", "duration_unit_text", "parse_duration", "seconds"]

# Go's number (``1``, ``1.5``, ``1.``, ``.5``), written so that no two ways match one text: the matching
# stays linear however long a hostile ``?wait=`` or CEL string is (``\d+\.?\d*`` is cubic on a run of digits).
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_UNIT = r"(?:ns|us|ms|s|m|h)"
# The whole grammar: a sign, then numbers with units, or a lone "0".
_GRAMMAR = re.compile(rf"([+-]?)((?:{_NUMBER}{_UNIT})+|0)")
_PART = re.compile(rf"({_NUMBER})({_UNIT})")
# A number with no unit: seconds (not CEL's).
_PLAIN = re.compile(rf"([+-]?)({_NUMBER})")
# Whole days before the rest (not CEL's): "7d", "1d12h".
_DAYS = re.compile(rf"(\d+)d((?:{_NUMBER}{_UNIT})*)")
_NANOS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_SECONDS = {unit: Decimal(nanos) / 10**9 for unit, nanos in _NANOS.items()}

_HINT = "write e.g. 30s, 15m, 1h30m or 7d"


def cel_nanoseconds(text: str) -> int:
    """CEL's ``duration(text)``: whole nanoseconds (each part rounded toward zero), negative for ``-``.

    Raises ``ValueError`` for text outside the grammar; range checks are CEL's (``policy/cel``).
    """
    match = _GRAMMAR.fullmatch(text)
    if not match:
        raise ValueError(f"cannot parse duration {text!r}")
    nanos = sum(int(Decimal(n) * _NANOS[unit]) for n, unit in _PART.findall(match.group(2)))
    return -nanos if match.group(1) == "-" else nanos


def seconds(value: str | int | float) -> float:
    """Seconds from a duration a person wrote: ``90``, ``"90"``, ``"1.5"``, ``"30s"``, ``"1h30m"``, ``"-5m"``.

    Any sign and zero are accepted; ``parse_duration`` is the one that asks for more than zero.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    days = _DAYS.fullmatch(text)
    if days is not None:
        return int(days.group(1)) * 86400.0 + (seconds(days.group(2)) if days.group(2) else 0.0)
    match = _PLAIN.fullmatch(text) or _GRAMMAR.fullmatch(text)
    if not match:
        raise ValueError(f"{value!r} is not a duration; {_HINT}")
    sign, body = match.groups()
    if match.re is _PLAIN:
        number = Decimal(body)
    else:
        number = sum((Decimal(n) * _SECONDS[unit] for n, unit in _PART.findall(body)), Decimal(0))
    return float(-number if sign == "-" else number)


def parse_duration(value: str | int | float) -> float:
    """Seconds, more than zero, from a config or policy duration: ``90``, ``"30s"``, ``"15m"``, ``"1h30m"``."""
    total = seconds(value)
    if total <= 0:
        raise ValueError("a duration must be positive")
    return total


def duration_text(seconds: float) -> str:
    """A duration as the config writes it: ``10m``, ``1h30m``, ``45s`` (whole seconds, at least ``1s``)."""
    whole = max(int(seconds), 1)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)


def duration_unit_text(seconds: float) -> str:
    """A duration in the largest one unit that divides its whole seconds: ``1h``, ``90m``, ``45s``."""
    whole = int(seconds)
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    return f"{whole // 60}m" if whole % 60 == 0 else f"{whole}s"
