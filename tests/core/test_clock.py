"""Wall-clock time (gateway/core/clock.py): each visible format to the byte, and RFC 3339 read back."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from gateway.core import clock

TS = 1764631868.123456  # 2025-12-01T23:31:08.123456Z
WHOLE = 1764631868.0


def test_each_format_to_the_byte() -> None:
    assert clock.rfc3339(TS) == "2025-12-01T23:31:08Z"
    assert clock.rfc3339_ms(TS) == "2025-12-01T23:31:08.123Z"
    assert clock.rfc3339_us(TS) == "2025-12-01T23:31:08.123456Z"
    assert clock.rfc3339_offset(TS) == "2025-12-01T23:31:08+00:00"


def test_a_whole_second() -> None:
    assert clock.rfc3339(WHOLE) == "2025-12-01T23:31:08Z"
    assert clock.rfc3339_ms(WHOLE) == "2025-12-01T23:31:08.000Z"
    assert clock.rfc3339_us(WHOLE) == "2025-12-01T23:31:08Z"  # MCP tasks have always dropped a zero fraction
    assert clock.rfc3339_offset(WHOLE) == "2025-12-01T23:31:08+00:00"


def test_precision_is_cut_not_rounded() -> None:
    assert clock.rfc3339(1764631868.9) == "2025-12-01T23:31:08Z"
    assert clock.rfc3339_ms(1764631868.9999) == "2025-12-01T23:31:08.999Z"


def test_now_is_the_wall_clock() -> None:
    before = time.time()
    assert before <= clock.now() <= time.time()
    stamp = clock.now_rfc3339()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
    assert abs(clock.parse_rfc3339(stamp) - time.time()) < 60


@pytest.mark.parametrize(("format_", "precision"), [(clock.rfc3339, 1), (clock.rfc3339_offset, 1),
                                                    (clock.rfc3339_ms, 1e-3), (clock.rfc3339_us, 1e-6)])
def test_every_format_reads_back(format_: Callable[[float], str], precision: float) -> None:
    assert 0 <= TS - clock.parse_rfc3339(format_(TS)) < precision


@pytest.mark.parametrize(("text", "ts"), [("2025-12-01T23:31:08Z", WHOLE), ("2025-12-01T23:31:08+00:00", WHOLE),
                                          ("2025-12-02T01:31:08+02:00", WHOLE), ("2025-12-01T23:31:08.5Z", WHOLE + .5)])
def test_parse(text: str, ts: float) -> None:
    assert clock.parse_rfc3339(text) == ts


@pytest.mark.parametrize("text", ["", "yesterday", "2025-13-01T00:00:00Z", "2025-12-01T25:00:00Z"])
def test_parse_refuses_what_is_not_a_time(text: str) -> None:
    with pytest.raises(ValueError):
        clock.parse_rfc3339(text)



def test_exports() -> None:
    assert clock.__all__ == ["now", "now_rfc3339", "parse_rfc3339", "rfc3339", "rfc3339_ms", "rfc3339_offset",
                             "rfc3339_us"]
