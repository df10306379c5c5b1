"""The one duration grammar (gateway/core/durations.py): every form each former grammar took still reads
the same, what each refused (and still refuses) fails, and the formatters read back."""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.durations import cel_nanoseconds, duration_text, duration_unit_text, parse_duration, seconds
from gateway.policy.cel.strings import parse_duration as cel_duration

# What the config and policy grammar took before (``^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$`` after strip()).
CONFIG_FORMS = [("30s", 30), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("1h30m15s", 5415), ("2h5s", 7205),
                ("0h30m", 1800), ("01m", 60), (" 10m ", 600), ("\t45s\n", 45), ("٣s", 3), ("1h0m0s", 3600)]
# What ``?wait=`` took on top: a plain number of seconds, with or without ``s``, zero included.
WAIT_FORMS = [("30", 30), ("1.5", 1.5), ("1.5s", 1.5), ("0", 0), ("0s", 0), ("0.0s", 0), (" 12 ", 12), ("٣", 3)]
# Accepted now, refused by the config grammar before (the CEL forms, and a plain number as text).
NEW_FORMS = [("90", 90), ("1.5h", 5400), ("500ms", 0.5), ("250us", 0.00025), ("1ns", 1e-9), (".5s", 0.5),
             ("30.", 30), ("+1m", 60), ("30m1h", 5400), ("1m1m", 120)]
# Refused by every grammar, before and now.
NEVER = ["", " ", "h", "s", "1w", "1 h", "1h 30m", "1H", "nan", "inf", "-inf", "1e3", "0x10", "--1s", "+-1s",
         "1h-1m", "1.2.3s", "soon", "1hour", "1_000s", "½s", "1,5s"]


@pytest.mark.parametrize(("text", "expected"), CONFIG_FORMS + WAIT_FORMS + NEW_FORMS)
def test_each_form_reads_as_its_seconds(text: str, expected: float) -> None:
    assert seconds(text) == pytest.approx(expected, rel=1e-12, abs=0)


@pytest.mark.parametrize(("text", "expected"), CONFIG_FORMS + [f for f in NEW_FORMS if f[1] > 0])
def test_config_and_policies_take_each_positive_form(text: str, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected, rel=1e-12, abs=0)


def test_whole_days_may_lead_outside_cel() -> None:
    assert parse_duration("7d") == 7 * 86400 and parse_duration("1d12h") == 1.5 * 86400
    with pytest.raises(ValueError):
        cel_nanoseconds("7d")  # CEL's duration() keeps Go's grammar, which has no days
    for text in ("1.5d", "d", "7d 1h", "-7d"):
        with pytest.raises(ValueError):
            parse_duration(text)


def test_whole_seconds_stay_exact() -> None:
    assert parse_duration("1h30m") == 5400.0 and type(parse_duration("1h30m")) is float
    assert seconds("0.1") == 0.1  # as float("0.1"), which ?wait= gave before


@pytest.mark.parametrize("text", NEVER)
def test_text_outside_the_grammar_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape("is not a duration; write e.g. 30s, 15m, 1h30m or 7d")):
        seconds(text)
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("value", ["0", "0s", "0h0m0s", "-5m", "-1", 0, -3, 0.0, -0.5])
def test_config_durations_must_be_more_than_zero(value: str | int | float) -> None:
    with pytest.raises(ValueError, match="a duration must be positive"):
        parse_duration(value)


@pytest.mark.parametrize(("value", "expected"), [(90, 90.0), (0.5, 0.5), (1, 1.0)])
def test_numbers_are_seconds(value: int | float, expected: float) -> None:
    assert parse_duration(value) == expected and seconds(value) == expected


def test_a_bool_is_not_a_number_of_seconds() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(True)


def test_signed_and_zero_forms_read_for_wait() -> None:
    assert seconds("-5m") == -300.0 and seconds("+5m") == 300.0 and seconds("-0") == 0.0


# --- CEL: the spec grammar itself, no conveniences --------------------------------------------------------

@pytest.mark.parametrize(("text", "nanos"), [
    ("0", 0), ("-0", 0), ("+0", 0), ("1ns", 1), ("1us", 1000), ("1ms", 10**6), ("1s", 10**9), ("1m", 60 * 10**9),
    ("1h", 3600 * 10**9), ("1h30m", 5400 * 10**9), ("-1.5s", -1_500_000_000), ("1.5ns", 1), ("-1.9ns", -1),
    (".5s", 500_000_000), ("1.s", 10**9), ("30m1h", 5400 * 10**9), ("1h1h", 7200 * 10**9),
])
def test_cel_reads_go_durations_in_nanoseconds(text: str, nanos: int) -> None:
    assert cel_nanoseconds(text) == nanos


@pytest.mark.parametrize("text", ["90", "1.5", " 1s", "1s ", "0s ", "", "00", "1d", "-", "+", "1 s", "x"])
def test_cel_keeps_the_spec_grammar(text: str) -> None:
    """No plain numbers and no surrounding space: the C++ engine refuses them too."""
    with pytest.raises(ValueError, match="cannot parse duration"):
        cel_nanoseconds(text)


def test_cel_duration_rounds_to_microseconds_toward_zero() -> None:
    assert cel_duration("1ns") == timedelta(0)
    assert cel_duration("1999ns") == timedelta(microseconds=1)
    assert cel_duration("-1999ns") == timedelta(microseconds=-1)
    assert cel_duration("1h30m") == timedelta(hours=1, minutes=30)
    with pytest.raises(ValueError, match="out of range"):
        cel_duration("87660000h1s")  # past google.protobuf.Duration's 10,000 years


def test_every_cel_form_reads_the_same_for_config() -> None:
    for text in ["1h30m", "-1.5s", "250ms", "0", "1h1h"]:
        assert math.isclose(seconds(text), cel_nanoseconds(text) / 1e9, rel_tol=1e-12)


# --- back to text ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "text"), [(1, "1s"), (45, "45s"), (60, "1m"), (600, "10m"), (3600, "1h"),
                                             (5400, "1h30m"), (5415, "1h30m15s"), (7205, "2h5s"), (86400, "24h"),
                                             (0.5, "1s"), (0, "1s"), (59.9, "59s")])
def test_duration_text(value: float, text: str) -> None:
    assert duration_text(value) == text


@pytest.mark.parametrize(("value", "text"), [(45, "45s"), (60, "1m"), (5400, "90m"), (3600, "1h"), (7200, "2h"),
                                             (5415, "5415s"), (600.7, "10m")])
def test_duration_unit_text(value: float, text: str) -> None:
    assert duration_unit_text(value) == text


@pytest.mark.parametrize("whole", [1, 2, 59, 60, 61, 599, 3599, 3600, 3601, 5400, 86399, 86400, 10**7 + 17])
def test_each_formatter_reads_back_to_the_same_whole_seconds(whole: int) -> None:
    assert parse_duration(duration_text(whole)) == whole
    assert parse_duration(duration_unit_text(whole)) == whole
    assert re.fullmatch(r"(\d+h)?(\d+m)?(\d+s)?", duration_text(whole))  # the former config grammar reads it too


# --- nothing the former grammars took is refused or read differently ----------------------------------------

_FORMER_CONFIG = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_FORMER_WAIT = re.compile(r"^(\d+(?:\.\d+)?)s?$")


def _former_config(text: str) -> float | None:
    match = _FORMER_CONFIG.match(text.strip())
    if not match or not any(match.groups()):
        return None
    hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + secs
    return float(total) if total > 0 else None


def _former_wait(text: str) -> float | None:
    plain = _FORMER_WAIT.match(text.strip())
    return float(plain.group(1)) if plain else _former_config(text)


@given(st.from_regex(r"\A\s?(\d{1,4}h)?(\d{1,4}m)?(\d{1,4}s)?\s?\Z") | st.from_regex(r"\A\d{1,6}(\.\d{1,6})?s?\Z")
       | st.text(alphabet="0123456789hms. \t-+", max_size=12))
def test_what_the_former_grammars_took_reads_the_same(text: str) -> None:
    if (config := _former_config(text)) is not None:
        assert parse_duration(text) == config
    if (wait := _former_wait(text)) is not None:
        assert seconds(text) == wait


def test_exports() -> None:
    import gateway.core.durations

    assert gateway.core.durations.__all__ == ["cel_nanoseconds", "duration_text", "duration_unit_text",
                                              "parse_duration", "seconds"]


@pytest.mark.parametrize("text", ["9" * 5000, "9" * 5000 + "x", "9" * 5000 + ".5s", "1" * 100_000 + "sx",
                                  "1s" * 20_000 + "x"])
def test_a_hostile_length_parses_in_linear_time(text: str) -> None:
    """``\\d+\\.?\\d*`` has many ways to match a run of digits: a ``?wait=`` of 5000 nines took minutes."""
    started = time.thread_time()  # CPU time of this thread: other processes cannot inflate it
    for parse in (seconds, cel_nanoseconds):
        try:
            parse(text)
        except ValueError:
            pass
    assert time.thread_time() - started < 5
