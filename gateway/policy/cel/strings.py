"""CEL's strings extension and text conversions, in plain Python, for the cel-python engine.

The semantics follow cel-cpp's ``ext_strings`` as the C++ engine runs it: indexes count code
points, ``trim`` strips Unicode White_Space, ``split``/``replace`` take an optional limit where a
negative limit means "all". A bad index or unparsable text raises ``ValueError`` with a short
message; the engine turns that into an evaluation error.

``STRING_EXTENSION`` lists each receiver-style function as ``(parameter types, result type, impl)``
with the receiver first, so the engine can type-check calls at compile time and dispatch at run
time from the same table.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from gateway.core.durations import cel_nanoseconds

__all__ = [
    "STRING_EXTENSION",
    "format_double",
    "format_duration",
    "format_timestamp",
    "parse_bool",
    "parse_double",
    "parse_duration",
    "parse_int",
    "parse_timestamp",
]

# Unicode White_Space (what cel-cpp's trim strips); Python's isspace() also counts U+001C..U+001F.
_WHITE_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
# google.protobuf.Duration's range: +-10,000 years.
MAX_DURATION_SECONDS = 315_576_000_000


def char_at(text: str, index: int) -> str:
    """The code point at ``index``; ``index == size()`` gives the empty string."""
    if index < 0 or index > len(text):
        raise ValueError(f"charAt: index {index} out of range for a string of size {len(text)}")
    return text[index : index + 1]


def index_of(text: str, sub: str, start: int = 0) -> int:
    """First index of ``sub`` at or after ``start``, or -1."""
    if start < 0 or start > len(text):
        raise ValueError(f"indexOf: index {start} out of range")
    return text.find(sub, start)


def last_index_of(text: str, sub: str, start: int | None = None) -> int:
    """Last index of ``sub`` starting at or before ``start``, or -1."""
    if start is None:
        return text.rfind(sub)
    if start < 0 or start > len(text):
        raise ValueError(f"lastIndexOf: index {start} out of range")
    return text.rfind(sub, 0, start + len(sub))


def replace(text: str, old: str, new: str, limit: int = -1) -> str:
    """Replace the first ``limit`` occurrences (all when negative)."""
    return text.replace(old, new, limit)


def split(text: str, sep: str, limit: int = -1) -> list[str]:
    """Split on ``sep`` into at most ``limit`` parts (all when negative, none when zero)."""
    if limit == 0:
        return []
    if sep == "":
        chars = list(text)
        if 0 < limit < len(chars):
            return [*chars[: limit - 1], "".join(chars[limit - 1 :])]
        return chars
    return text.split(sep, limit - 1 if limit > 0 else -1)


def substring(text: str, start: int, end: int | None = None) -> str:
    """Code points ``start`` up to ``end`` (default: the end of the string)."""
    stop = len(text) if end is None else end
    if start < 0 or start > len(text) or stop > len(text):
        raise ValueError(f"substring: range [{start}, {stop}) out of bounds for a string of size {len(text)}")
    if stop < start:
        raise ValueError(f"substring: end {stop} is before start {start}")
    return text[start:stop]


def join(parts: list[Any], sep: str = "") -> str:
    """Join a list of strings."""
    if not all(isinstance(part, str) for part in parts):
        raise ValueError("join: every list element must be a string")
    return sep.join(parts)


# name -> overloads as (parameter types, result type, implementation); the receiver comes first.
STRING_EXTENSION: dict[str, list[tuple[tuple[Any, ...], Any, Any]]] = {
    "charAt": [(("string", "int"), "string", char_at)],
    "indexOf": [(("string", "string"), "int", index_of), (("string", "string", "int"), "int", index_of)],
    "lastIndexOf": [
        (("string", "string"), "int", last_index_of),
        (("string", "string", "int"), "int", last_index_of),
    ],
    "lowerAscii": [(("string",), "string", lambda text: text.translate(_LOWER))],
    "upperAscii": [(("string",), "string", lambda text: text.translate(_UPPER))],
    "replace": [
        (("string", "string", "string"), "string", replace),
        (("string", "string", "string", "int"), "string", replace),
    ],
    "split": [
        (("string", "string"), ("list", "string"), split),
        (("string", "string", "int"), ("list", "string"), split),
    ],
    "substring": [(("string", "int"), "string", substring), (("string", "int", "int"), "string", substring)],
    "trim": [(("string",), "string", lambda text: text.strip(_WHITE_SPACE))],
    "join": [((("list", "string"),), "string", join), ((("list", "string"), "string"), "string", join)],
    "reverse": [(("string",), "string", lambda text: text[::-1])],
}


# --- conversions between text and values, as int(), double(), string() etc. do them ---

_INT = re.compile(r"\s*[+-]?\d+\s*")
_DOUBLE = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)\s*", re.I)
_BOOLS = {"true": True, "t": True, "1": True, "TRUE": True, "True": True, "T": True,
          "false": False, "f": False, "0": False, "FALSE": False, "False": False, "F": False}
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d{2}):(\d{2}))"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_int(text: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """A decimal integer within [low, high]; surrounding white space is allowed."""
    if not _INT.fullmatch(text) or not low <= int(text) <= high:
        raise ValueError(f"cannot convert string {text!r} to an integer")
    return int(text)


def parse_double(text: str) -> float:
    """A decimal floating-point number, or inf / nan."""
    if not _DOUBLE.fullmatch(text):
        raise ValueError(f"cannot convert string {text!r} to double")
    return float(text)


def parse_bool(text: str) -> bool:
    """true/false in the spellings CEL accepts (true, t, 1, TRUE, True and the false ones)."""
    if text not in _BOOLS:
        raise ValueError(f"cannot convert string {text!r} to bool")
    return _BOOLS[text]


def format_double(value: float) -> str:
    """The shortest round-trip digits in printf %g layout, as the C++ engine prints doubles."""
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    number = Decimal(repr(float(value))).normalize()
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite numbers only, checked above
    scientific = len(digits) - 1 + exponent
    if -4 <= scientific < 6:
        return format(number, "f")
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}"


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp, as an aware UTC datetime (sub-microsecond digits are dropped)."""
    match = _TIMESTAMP.fullmatch(text)
    if not match:
        raise ValueError(f"cannot parse timestamp {text!r}")
    year, month, day, hour, minute, second, fraction, sign, off_h, off_m = match.groups()
    micros = int((fraction or "0").ljust(9, "0")[:6])
    try:
        local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micros)
        offset = timedelta(hours=int(off_h or 0), minutes=int(off_m or 0)) * (-1 if sign == "-" else 1)
        return (local - offset).replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise ValueError(f"cannot parse timestamp {text!r}") from None


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with 0, 3 or 6 fractional digits."""
    value = value.astimezone(UTC)
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    return text + _fraction(value.microsecond) + "Z"


def timestamp_seconds(value: datetime) -> int:
    """Whole seconds since the Unix epoch, rounded down."""
    return (value - _EPOCH) // timedelta(seconds=1)


def parse_duration(text: str) -> timedelta:
    """A Go-style duration such as ``15m``, ``1h30m``, ``-1.5s`` or ``100ms`` (the grammar: core/durations.py)."""
    nanos = cel_nanoseconds(text)
    return check_duration(timedelta(microseconds=(-1 if nanos < 0 else 1) * (abs(nanos) // 1000)))


def check_duration(value: timedelta) -> timedelta:
    """``value`` if it is within the range of google.protobuf.Duration."""
    if abs(value.total_seconds()) > MAX_DURATION_SECONDS:
        raise ValueError("duration out of range")
    return value


def format_duration(value: timedelta) -> str:
    """Seconds with 0, 3 or 6 fractional digits, e.g. ``5400s`` or ``-1.500s``."""
    micros = value // timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 10**6)
    return f"{sign}{seconds}{_fraction(fraction)}s"


def _fraction(micros: int) -> str:
    if micros == 0:
        return ""
    if micros % 1000 == 0:
        return f".{micros // 1000:03d}"
    return f".{micros:06d}"
